"""`tensorkiln bench`: measures tensorkiln and the peers on the same model and checks they agree."""
from __future__ import annotations

import json

import pytest

from tensorkiln.tools.cli import main

pytest.importorskip("torch")


def test_bench_mlp_against_pytorch(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "mlp", "--vs", "torch", "--repeat", "3", "--batch", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tensorkiln" in text and "torch" in text and "yes" in text
    data = json.loads(out.read_text())
    rows = data["results"]["mlp"]
    assert set(rows) == {"tensorkiln", "torch"} and all(r["agrees"] for r in rows.values())
    assert rows["tensorkiln"]["compile_s"] > 0 and rows["torch"]["latency_s"] > 0


def test_bench_rejects_unknown_peers(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "mlp", "--vs", "tvm"])


def test_gpt2_prefill_and_decode_against_every_installed_peer():
    """A small GPT-2: tensorkiln, PyTorch, ONNX Runtime and OpenVINO (when installed) agree on both steps."""
    from tensorkiln.tools.bench_gpt2 import measure_gpt2
    from tensorkiln.models import GPT2Config
    peers = ["torch"]
    for module, names in (("onnxruntime", ["onnxruntime"]), ("openvino", ["openvino", "openvino-f32"])):
        try:
            __import__(module)
            peers += names
        except ImportError:
            pass
    config = GPT2Config(vocab_size=300, n_positions=160, n_embd=64, n_layer=2, n_head=4)
    prefill, decode = measure_gpt2(1, peers, repeat=2, config=config)
    assert set(prefill) == {"tensorkiln", *peers}
    assert set(decode) == {"tensorkiln", *peers, "torch static cache"}  # PyTorch's cache written in place too
    for rows in (prefill, decode):
        assert all(r["agrees"] and r["latency_s"] > 0 for r in rows.values()), rows


def test_bench_bf16_against_openvino_in_one_run(tmp_path, capsys):
    """--precision bf16: tensorkiln in bf16 and in fp32, OpenVINO's default and its bf16 hint, one run."""
    pytest.importorskip("openvino")
    out = tmp_path / "bench.json"
    assert main(["bench", "mlp", "--precision", "bf16", "--repeat", "2", "--rounds", "2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = data["results"]["mlp"]
    assert data["precision"] == "bf16"
    assert set(rows) == {"tensorkiln", "tensorkiln-fp32", "openvino", "openvino-bf16"}
    assert all(r["agrees"] and r["latency_s"] > 0 for r in rows.values()), rows
    assert rows["tensorkiln"]["max_rel_error"] > rows["tensorkiln-fp32"]["max_rel_error"]  # it did round


def test_bench_int8_runs_the_quantized_file_against_its_peers_in_one_run(tmp_path):
    """--precision int8: ONNX Runtime's int8 file run by tensorkiln's integer kernels, ONNX Runtime and
    OpenVINO (when installed), and tensorkiln fp32 on the float file, in one run; each int8 run checked
    against the file's exact answer (the reference interpreter)."""
    pytest.importorskip("onnxruntime.quantization")
    out = tmp_path / "bench.json"
    code = main(["bench", "mlp", "--precision", "int8", "--repeat", "2", "--rounds", "2", "--batch", "3",
                 "--json", str(out)])
    data = json.loads(out.read_text())
    rows = data["results"]["mlp"]
    assert data["precision"] == "int8"
    assert {"tensorkiln", "tensorkiln-fp32", "onnxruntime"} <= set(rows) <= {"tensorkiln", "tensorkiln-fp32",
                                                                              "onnxruntime", "openvino"}
    assert rows["tensorkiln"]["agrees"] and rows["tensorkiln-fp32"]["agrees"], rows
    assert rows["tensorkiln"]["max_rel_error"] < 1e-5  # the integer kernels compute the file's exact sums
    assert all(r["latency_s"] > 0 and r["compile_s"] > 0 for r in rows.values())
    # the exit status says whether every run agreed (ONNX Runtime's saturating AVX2 GEMM may not)
    assert code == (0 if all(r["agrees"] for r in rows.values()) else 1)


def test_bench_int8_names_the_models_it_runs(capsys):
    with pytest.raises(SystemExit, match="--precision int8 runs resnet18, mobilenetv2, bert, mlp"):
        main(["bench", "gpt2", "--precision", "int8"])

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


def test_interleaved_medians_take_the_functions_in_turns():
    """Every round times a block of each function in turn; blocks grow until they last min_block_seconds."""
    import time

    from tensorkiln.tools.timing import interleaved_medians
    order = []
    runs = {"slow": lambda: (order.append("slow"), time.sleep(0.01)),
            "fast": lambda: order.append("fast")}
    medians = interleaved_medians(runs, repeat=6, rounds=3, min_block_seconds=0.01, pause_seconds=0.0,
                                  max_block_calls=20)
    assert medians["slow"] >= 0.01 > medians["fast"]
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert switches == 2 * 3 - 1  # slow, fast, slow, fast, slow, fast
    assert order.count("slow") == 3 * (1 + 2)  # an untimed call, then ceil(6 / 3) calls (they last 0.01 s)
    assert order.count("fast") == 3 * (1 + 20)  # microseconds each: the block is capped at 20 calls


def test_alternating_blocks_pair_the_functions_and_reverse_their_order():
    """One block of each function per round, the order reversed every round, one figure per block."""
    import time

    from tensorkiln.tools.timing import alternating_blocks
    order = []
    runs = {"slow": lambda: (order.append("slow"), time.sleep(0.005)), "fast": lambda: order.append("fast")}
    blocks = alternating_blocks(runs, pairs=4, min_block_seconds=0.004, pause_seconds=0.0)
    assert [len(v) for v in blocks.values()] == [4, 4]
    assert all(s > f for s, f in zip(blocks["slow"], blocks["fast"]))
    runs_of = [name for k, name in enumerate(order) if k == 0 or order[k - 1] != name]
    assert runs_of == ["slow", "fast", "slow", "fast", "slow"]  # slow, fast | fast, slow | slow, fast | fast, slow
    assert order.count("slow") == 4 * 2  # an untimed call, then one that lasts the block's 0.004 s


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

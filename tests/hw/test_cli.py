"""`tensorkiln accel ...` through tensorkiln.hw.cli.main."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from tensorkiln.hw import read_scalesim_report
from tensorkiln.hw.cli import ONNX_UNAVAILABLE, main

FIXTURES = Path(__file__).parent / "fixtures"
CFG = str(FIXTURES / "configs" / "32x8_is.cfg")
TOPO = str(FIXTURES / "topologies" / "resnet18_part.csv")


def test_config_and_topology_write_the_three_reports(tmp_path, capsys):
    assert main(["--config", CFG, "--topology", TOPO, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "32x8 array, input stationary" in out
    assert "Conv3_1a" in out and "total" in out
    for name in ("COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv", "DETAILED_ACCESS_REPORT.csv"):
        assert (tmp_path / name).exists() and f"wrote {tmp_path / name}" in out
    assert len(read_scalesim_report(tmp_path / "COMPUTE_REPORT.csv")) == 5


def test_dataflow_flag_overrides_the_config(capsys):
    assert main(["-c", CFG, "-t", TOPO, "--dataflow", "best"]) == 0
    assert "best per layer" in capsys.readouterr().out


def test_topology_as_positional_with_array_and_preset(capsys):
    assert main([TOPO, "--array", "16x8", "--dataflow", "os", "--bandwidth", "8"]) == 0
    out = capsys.readouterr().out
    assert "16x8 array, output stationary" in out and "8 B/cycle" in out
    assert main(["--preset", "eyeriss", "-t", TOPO]) == 0
    assert "eyeriss: 12x14 array" in capsys.readouterr().out


def test_gemm_topology(capsys):
    assert main(["-t", str(FIXTURES / "topologies" / "gemm.csv"), "--array", "8x8"]) == 0
    assert "QKV" in capsys.readouterr().out


def test_errors_exit_2_with_the_message(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                   "Channels, Num Filter, Strides,\nL, 8, 8, 3, 3, 4, 4, two,\n")
    assert main(["-t", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2:" in err and "'Strides'" in err
    assert main([]) == 2
    assert "give a topology" in capsys.readouterr().err
    assert main(["-t", TOPO, "--array", "big"]) == 2
    assert main(["-t", TOPO, "--dataflow", "rs"]) == 2        # argparse rejects it


def test_onnx_without_the_onnx_package(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)   # import fails, as without the onnx extra
    assert main(["model.onnx", "--array", "32x32", "--dataflow", "ws"]) == 2
    assert ONNX_UNAVAILABLE in capsys.readouterr().err


def test_presets_listing(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "tpu-v1" in out and "256x256" in out and "eyeriss" in out


def test_sweep_writes_csv_and_marks_infeasible_points(tmp_path, capsys):
    code = main(["sweep", "--topology", TOPO, "--out", str(tmp_path), "--arrays", "8x8,16x4",
                 "--dataflows", "ws,os", "--sram-kb", "0.1,64"])
    assert code == 0
    out = capsys.readouterr().out
    assert "fastest:" in out and "infeasible" in out
    with (tmp_path / "sweep.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 2
    feasible = [r for r in rows if r["feasible"] == "1"]
    assert feasible and all(int(r["cycles"]) > 0 for r in feasible)
    assert any(r["feasible"] == "0" and "SRAM" in r["error"] for r in rows)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no plot" in out
    else:
        assert (tmp_path / "sweep.png").exists()


def test_sweep_rejects_unknown_dataflow(tmp_path, capsys):
    assert main(["sweep", "-t", TOPO, "-o", str(tmp_path), "--dataflows", "xx"]) == 2
    assert "unknown dataflow" in capsys.readouterr().err

"""tensorkiln's closed forms against SCALE-Sim 3.0's stored outputs (tests/hw/fixtures).

Every fixture directory scalesim_out/<topology>/<config>/ holds the three
reports SCALE-Sim 3.0 wrote for configs/<config>.cfg and topologies/<topology>.csv
(commands in fixtures/README.md). SCALE-Sim is never run here.

Required: compute cycles within 1 % and SRAM access counts within 1 % on every
layer. We in fact reproduce them exactly, and assert that. DRAM traffic comes
from a different (reuse-based) model; the last tests pin down how it compares.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln.hw import read_config, read_scalesim_report, read_topology, simulate

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = sorted(p for p in (FIXTURES / "scalesim_out").glob("*/*") if p.is_dir())
IDS = [f"{p.parent.name}-{p.name}" for p in RUNS]


def test_fixtures_cover_shapes_dataflows_and_topologies():
    configs = {p.name for p in RUNS}
    topologies = {p.parent.name for p in RUNS}
    for shape in ("16x16", "32x8", "8x32"):          # square, tall, wide
        for df in ("ws", "os", "is"):
            assert f"{shape}_{df}" in configs
    assert {"resnet18_part", "mobilenet_dw", "gemm"} <= topologies


def _reports(run: Path, tmp_path: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    array = read_config(FIXTURES / "configs" / f"{run.name}.cfg").to_array()
    layers = read_topology(FIXTURES / "topologies" / f"{run.parent.name}.csv")
    simulate(layers, array=array).to_csv(tmp_path)
    out = {}
    for name in ("COMPUTE_REPORT", "BANDWIDTH_REPORT", "DETAILED_ACCESS_REPORT"):
        ours = read_scalesim_report(tmp_path / f"{name}.csv")
        theirs = read_scalesim_report(run / f"{name}.csv")
        assert len(ours) == len(theirs), f"{name}: {len(ours)} rows, SCALE-Sim {len(theirs)}"
        out[name] = (ours, theirs)
    return out


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_cycles_utilization_and_sram_traffic_match_scalesim(run, tmp_path):
    reports = _reports(run, tmp_path)
    for ours, theirs in zip(*reports["COMPUTE_REPORT"]):
        assert theirs["Stall Cycles"] == 0            # CALC mode: SCALE-Sim never stalls
        assert abs(ours["Total Cycles"] - theirs["Total Cycles"]) <= 0.01 * theirs["Total Cycles"]
        assert ours["Total Cycles"] == theirs["Total Cycles"]
        for col in ("Overall Util %", "Mapping Efficiency %", "Compute Util %"):
            assert ours[col] == pytest.approx(theirs[col], rel=1e-9), col
    for ours, theirs in zip(*reports["DETAILED_ACCESS_REPORT"]):
        for col in ours:
            if col.startswith("SRAM"):
                if col.endswith(("Reads", "Writes")):
                    assert abs(ours[col] - theirs[col]) <= 0.01 * theirs[col], col
                assert ours[col] == theirs[col], col
    for ours, theirs in zip(*reports["BANDWIDTH_REPORT"]):
        for col in ("Avg IFMAP SRAM BW", "Avg FILTER SRAM BW", "Avg OFMAP SRAM BW"):
            assert ours[col] == pytest.approx(theirs[col], rel=1e-9), col


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_dram_traffic_against_scalesim(run, tmp_path):
    ours_rows, theirs_rows = _reports(run, tmp_path)["DETAILED_ACCESS_REPORT"]
    dataflow = run.name.split("_")[-1]
    # Where every operand fits its SRAM half (the GEMM and MobileNet topologies), and for
    # ws on the ResNet-18 layers of resnet18_part, both models read each word once.
    exact = run.parent.name in ("gemm", "mobilenet_dw") or (
        run.parent.name == "resnet18_part" and dataflow == "ws")
    for ours, theirs in zip(ours_rows, theirs_rows):
        # Otherwise they differ on purpose: SCALE-Sim's read buffer forgets everything
        # whenever half of it has been refilled, ours keeps what fits. Measured per layer
        # on these fixtures: -37 % .. +21 %; this band only guards against regressions.
        for col in ("DRAM IFMAP Reads", "DRAM Filter Reads"):
            if exact:
                assert ours[col] == theirs[col], col
            else:
                assert 0.55 * theirs[col] <= ours[col] <= 1.45 * theirs[col], col
        # Writes: SCALE-Sim sends every partial sum to DRAM; we accumulate partial sums
        # in the ofmap SRAM when they fit, so only os (no partial sums) agrees.
        if dataflow == "os":
            assert ours["DRAM OFMAP Writes"] == pytest.approx(theirs["DRAM OFMAP Writes"],
                                                             rel=0.01)
        else:
            assert theirs["DRAM OFMAP Writes"] == pytest.approx(theirs["SRAM OFMAP Writes"],
                                                               rel=0.01)
            assert ours["DRAM OFMAP Writes"] <= theirs["DRAM OFMAP Writes"]


def _network_reads(run: Path, tmp_path: Path, col: str) -> tuple[float, float]:
    ours, theirs = _reports(run, tmp_path)["DETAILED_ACCESS_REPORT"]
    return sum(r[col] for r in ours), sum(r[col] for r in theirs)


@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
def test_resnet18_network_dram_reads(dataflow, tmp_path):
    run = FIXTURES / "scalesim_out" / "resnet18" / f"32x32_{dataflow}"
    ours_f, theirs_f = _network_reads(run, tmp_path, "DRAM Filter Reads")
    assert ours_f == pytest.approx(theirs_f, rel=0.01)
    ours_i, theirs_i = _network_reads(run, tmp_path, "DRAM IFMAP Reads")
    # ws: -0.7 %; os and is: SCALE-Sim re-reads more of the ifmap (see above).
    assert 0.7 * theirs_i <= ours_i <= 1.05 * theirs_i

"""SCALE-Sim file formats: .cfg, topology .csv and the three reports, read and written."""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln.hw import (EYERISS, Layer, ScaleSimConfig, read_config, read_scalesim_report,
                           read_topology, simulate, write_config, write_topology)
from tensorkiln.hw.scalesim_reports import (BANDWIDTH_COLUMNS, COMPUTE_COLUMNS,
                                            DETAILED_COLUMNS)

FIXTURES = Path(__file__).parent / "fixtures"


def test_reads_a_scalesim_config():
    cfg = read_config(FIXTURES / "configs" / "32x8_os.cfg")
    assert (cfg.array_rows, cfg.array_cols, cfg.dataflow) == (32, 8, "os")
    assert (cfg.ifmap_sram_kb, cfg.filter_sram_kb, cfg.ofmap_sram_kb) == (64, 64, 64)
    assert (cfg.ifmap_offset, cfg.filter_offset, cfg.ofmap_offset) == (0, 10_000_000, 20_000_000)
    assert cfg.bandwidth_mode == "CALC"
    array = cfg.to_array()
    assert (array.rows, array.cols, array.dram_words_per_cycle) == (32, 8, None)


def test_reads_scalesim_v2_style_config_without_the_newer_sections(tmp_path):
    # SCALE-Sim's own configs/scale.cfg (v2 layout, USER bandwidth, no [layout]).
    path = tmp_path / "scale.cfg"
    path.write_text("[general]\nrun_name = scale_example_run_32x32_os\n\n"
                    "[architecture_presets]\nArrayHeight:    32\nArrayWidth:     32\n"
                    "IfmapSramSzkB:   64\nFilterSramSzkB:  64\nOfmapSramSzkB:   64\n"
                    "IfmapOffset:    0\nFilterOffset:   10000000\nOfmapOffset:    20000000\n"
                    "Bandwidth : 64\nDataflow : os\nMemoryBanks:   1\n\n"
                    "[run_presets]\nInterfaceBandwidth: USER\n")
    cfg = read_config(path)
    assert cfg.run_name == "scale_example_run_32x32_os"
    assert cfg.bandwidths == (64,)
    assert cfg.to_array().dram_words_per_cycle == 64


def test_config_round_trip(tmp_path):
    cfg = ScaleSimConfig(run_name="rt", array_rows=12, array_cols=14, ifmap_sram_kb=36,
                         filter_sram_kb=36, ofmap_sram_kb=20, dataflow="is",
                         bandwidth_mode="USER", bandwidths=(10,))
    write_config(cfg, tmp_path / "rt.cfg")
    assert read_config(tmp_path / "rt.cfg") == cfg


def test_config_from_a_preset():
    cfg = ScaleSimConfig.from_array(EYERISS)
    # SCALE-Sim counts 1-byte words: Eyeriss' 36 KiB of 16-bit words is 72 KiB for it.
    assert (cfg.array_rows, cfg.array_cols, cfg.ifmap_sram_kb) == (12, 14, 72)
    assert cfg.bandwidth_mode == "USER" and cfg.bandwidths == (10,)


def test_reads_conv_gemm_and_depthwise_topologies():
    conv = read_topology(FIXTURES / "topologies" / "resnet18_part.csv")
    assert [layer.name for layer in conv][:2] == ["Conv3_1a", "Conv3_ds"]
    assert conv[0].gemm_dims.m == 28 * 28 and conv[0].gemm_dims.k == 3 * 3 * 64
    gemm = read_topology(FIXTURES / "topologies" / "gemm.csv")
    assert gemm[0].kind == "gemm"
    assert (gemm[0].gemm_dims.m, gemm[0].gemm_dims.n, gemm[0].gemm_dims.k) == (64, 192, 64)
    dw = read_topology(FIXTURES / "topologies" / "mobilenet_dw.csv")[1]
    assert (dw.name, dw.kind, dw.groups, dw.channels, dw.num_filters) == ("DP2", "depthwise",
                                                                          16, 1, 1)


def test_topology_rows_without_trailing_comma_and_with_comments(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\n\n"
                    "\tConv11,28,28,1,1,256,256,1\nConv12_dw,28,28,3,3,1,1,2,#dw\n"
                    "Sparse1, 8, 8, 3, 3, 4, 4, 1, 2:2,\n")
    layers = read_topology(path)
    assert [(l.name, l.stride_h) for l in layers] == [("Conv11", 1), ("Conv12_dw", 2),
                                                     ("Sparse1", 1)]


@pytest.mark.parametrize("layers", [
    [Layer("A", 12, 12, 3, 3, 8, 16, 2, 2), Layer("B", 5, 5, 1, 1, 16, 4)],
    [Layer.gemm("G", 10, 20, 30), Layer.gemm("H", 1, 2, 3)],
    [Layer("DP1", 10, 10, 3, 3, 1, 1, groups=6, kind="depthwise"),
     Layer("C", 8, 8, 3, 3, 6, 6)],
])
def test_topology_round_trip(layers, tmp_path):
    write_topology(layers, tmp_path / "net.csv")
    assert read_topology(tmp_path / "net.csv") == layers


def test_grouped_layers_are_written_one_row_per_group(tmp_path):
    grouped = Layer("grp", 10, 10, 3, 3, 4, 2, groups=3)
    write_topology([grouped], tmp_path / "g.csv")
    back = read_topology(tmp_path / "g.csv")
    assert [l.name for l in back] == ["grp_g0", "grp_g1", "grp_g2"]
    assert sum(l.macs for l in back) == grouped.macs


def test_depthwise_without_dp_in_its_name_gets_the_prefix(tmp_path):
    write_topology([Layer("dw", 10, 10, 3, 3, 1, 1, groups=4, kind="depthwise")],
                   tmp_path / "d.csv")
    (back,) = read_topology(tmp_path / "d.csv")
    assert (back.name, back.groups) == ("DP_dw", 4)


def test_reports_have_scalesim_headers_and_one_row_per_group(tmp_path):
    layers = read_topology(FIXTURES / "topologies" / "mobilenet_dw.csv")
    report = simulate(layers, array=(8, 8))
    paths = report.to_csv(tmp_path)
    assert [p.name for p in paths] == ["COMPUTE_REPORT.csv", "BANDWIDTH_REPORT.csv",
                                       "DETAILED_ACCESS_REPORT.csv", "TENSORKILN_SUMMARY.csv"]
    for path, columns in zip(paths, (COMPUTE_COLUMNS, BANDWIDTH_COLUMNS, DETAILED_COLUMNS)):
        header = path.read_text().splitlines()[0]
        assert header == ", ".join(columns) + ","
        rows = read_scalesim_report(path)
        assert len(rows) == 1 + 16 + 1 + 32            # DP layers expand per channel
        assert [r["LayerID"] for r in rows] == list(range(len(rows)))
    compute = read_scalesim_report(paths[0])
    assert sum(r["Total Cycles"] for r in compute) == report.totals.cycles


def test_scalesim_header_text_is_exact():
    # Copied from SCALE-Sim 3.0's simulator.py.
    assert ", ".join(COMPUTE_COLUMNS) + ",\n" == (
        "LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, Overall Util %, "
        "Mapping Efficiency %, Compute Util %,\n")
    assert ", ".join(BANDWIDTH_COLUMNS) + ",\n" == (
        "LayerID, Avg IFMAP SRAM BW, Avg FILTER SRAM BW, Avg OFMAP SRAM BW, "
        "Avg IFMAP DRAM BW, Avg FILTER DRAM BW, Avg OFMAP DRAM BW,\n")
    assert ", ".join(DETAILED_COLUMNS) + ",\n" == (
        "LayerID, SRAM IFMAP Start Cycle, SRAM IFMAP Stop Cycle, SRAM IFMAP Reads, "
        "SRAM Filter Start Cycle, SRAM Filter Stop Cycle, SRAM Filter Reads, "
        "SRAM OFMAP Start Cycle, SRAM OFMAP Stop Cycle, SRAM OFMAP Writes, "
        "DRAM IFMAP Start Cycle, DRAM IFMAP Stop Cycle, DRAM IFMAP Reads, "
        "DRAM Filter Start Cycle, DRAM Filter Stop Cycle, DRAM Filter Reads, "
        "DRAM OFMAP Start Cycle, DRAM OFMAP Stop Cycle, DRAM OFMAP Writes,\n")

"""simulate(): workloads, presets, dataflow choice, the report and its table."""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln import hw
from tensorkiln.hw import EnergyTable, Layer, simulate

FIXTURES = Path(__file__).parent / "fixtures"
RESNET = Path(hw.__file__).parent / "topologies" / "resnet18.csv"


def test_resnet18_topology_is_the_real_network():
    layers = hw.read_topology(RESNET)
    assert len(layers) == 21
    assert sum(l.macs for l in layers) == 1_814_073_344     # 1.81 GMACs, as published
    assert [l.ofmap_h for l in layers[:1] + layers[-1:]] == [112, 1]


def test_simulate_accepts_a_path_layers_or_one_layer():
    by_path = simulate(FIXTURES / "topologies" / "gemm.csv", array=(8, 8))
    by_list = simulate(hw.read_topology(FIXTURES / "topologies" / "gemm.csv"), array="8x8")
    assert by_path.totals == by_list.totals
    one = simulate(Layer.gemm("g", 4, 4, 4), array=(4, 4), dataflow="os")
    assert one.results[0].compute_cycles == 4 + 4 + 4 - 2 - 1


def test_best_picks_the_fastest_dataflow_per_layer():
    layers = hw.read_topology(RESNET)
    best = simulate(layers, array=(32, 32), dataflow="best")
    per_df = {df: simulate(layers, array=(32, 32), dataflow=df) for df in hw.DATAFLOWS}
    for i, r in enumerate(best.results):
        assert r.layer_cycles == min(per_df[df].results[i].layer_cycles for df in per_df)
    assert best.totals.cycles <= min(rep.totals.cycles for rep in per_df.values())
    assert {r.dataflow for r in best.results} <= set(hw.DATAFLOWS)


def test_presets_and_overrides():
    tpu = simulate(RESNET, preset="tpu-v1")
    assert (tpu.array.rows, tpu.array.cols, tpu.array.clock_mhz) == (256, 256, 700)
    assert tpu.array.dram_words_per_cycle == pytest.approx(34e9 / 700e6)
    assert "time at 700 MHz" in tpu.table()
    small = simulate(RESNET, preset="tpu-v1", array=(128, 128), dataflow="os")
    assert (small.array.rows, small.array.dataflow, small.array.clock_mhz) == (128, "os", 700)
    eyeriss = simulate(RESNET, preset="eyeriss")
    assert (eyeriss.array.rows, eyeriss.array.cols, eyeriss.array.word_bytes) == (12, 14, 2)
    with pytest.raises(hw.AccelConfigError, match="unknown preset"):
        simulate(RESNET, preset="tpu-v9")


def test_dram_bound_layers_stall_and_say_so():
    layer = Layer.gemm("fc", 1, 1000, 512)          # a matrix-vector product: no reuse
    free = simulate(layer, array=(32, 32))
    slow = simulate(layer, array=(32, 32), dram_words_per_cycle=1.0)
    assert free.results[0].bound == "compute" and free.results[0].stall_cycles == 0
    r = slow.results[0]
    assert r.bound == "DRAM"
    # One word per cycle sets the pace (cycles count like SCALE-Sim's: last index).
    assert r.layer_cycles == r.dram.total - 1
    assert r.attainable_macs_per_cycle < r.array.pes
    assert r.arithmetic_intensity == pytest.approx(r.macs / r.dram_bytes)
    assert "DRAM" in slow.table()


def test_energy_table_is_replaceable_and_adds_up():
    layer = Layer("c", 10, 10, 3, 3, 8, 8)
    base = simulate(layer, array=(8, 8)).results[0]
    double_dram = simulate(layer, array=(8, 8),
                           energy=EnergyTable(dram=400.0, unit="pJ")).results[0]
    assert double_dram.energy.dram == pytest.approx(2 * base.energy.dram)
    assert double_dram.energy.unit == "pJ"
    e = base.energy
    assert e.total == pytest.approx(e.mac + e.register + e.inter_pe + e.sram + e.dram)
    assert e.mac == layer.macs                       # 1 unit per MAC
    assert e.dram == 200 * base.dram.total


def test_depthwise_layer_totals_are_per_channel_times_channels():
    dw = Layer("DP", 18, 18, 3, 3, 1, 1, groups=16, kind="depthwise")
    one = Layer("DP", 18, 18, 3, 3, 1, 1)
    r, r1 = simulate(dw, array=(8, 8)).results[0], simulate(one, array=(8, 8)).results[0]
    assert r.layer_compute_cycles == 16 * r1.compute_cycles
    assert r.energy.total == pytest.approx(16 * r1.energy.total)


def test_table_lists_every_layer_and_the_roofline():
    report = simulate(FIXTURES / "topologies" / "resnet18_part.csv", array=(16, 16),
                      dram_words_per_cycle=16)
    text = report.table()
    for layer in report.results:
        assert layer.layer.name in text
    assert "roofline: peak 256 MAC/cycle, ridge at 16 MAC/B" in text
    assert "total" in text and "energy (MAC)" in text
    rows = report.rows()
    assert rows[0]["bound"] in ("compute", "DRAM")
    assert rows[0]["cycles"] == report.results[0].layer_cycles


def test_dram_model_reuse_rules():
    layer = Layer("c", 30, 30, 3, 3, 32, 64)
    roomy = simulate(layer, array=(16, 16), sram_kb=(1024, 1024, 1024)).results[0]
    assert roomy.dram.ifmap_reads == 30 * 30 * 32           # every input word once
    assert roomy.dram.filter_reads == 3 * 3 * 32 * 64
    assert roomy.dram.ofmap_writes == 28 * 28 * 64 and roomy.dram.ofmap_reads == 0
    assert roomy.dram.notes == ()
    g = layer.gemm_dims
    tight = simulate(layer, array=(16, 16), sram_kb=(16, 16, 16)).results[0]
    # ws: the ifmap (28800 words) does not fit 8150, so window overlap is lost and each
    # of the 64/16 column folds re-reads the whole im2col matrix.
    assert tight.dram.ifmap_reads == 4 * g.m * g.k
    assert tight.dram.ofmap_reads > 0                        # partial sums spilled
    assert any("ifmap" in n for n in tight.dram.notes)
    # os keeps a 3-row input band (3 * 30 * 32 words), so each sweep reads pixels once.
    tight_os = simulate(layer, array=(16, 16), sram_kb=(16, 16, 16), dataflow="os").results[0]
    assert tight_os.dram.ifmap_reads == 4 * 30 * 30 * 32
    assert tight_os.dram.ofmap_writes == g.m * g.n and tight_os.dram.ofmap_reads == 0

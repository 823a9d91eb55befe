"""The accelerator model's precisions: word widths, DRAM bytes, energy per MAC and per access."""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln import hw
from tensorkiln.hw import PRECISIONS, AccelConfigError, ArrayConfig, SramTooSmallError, simulate
from tensorkiln.hw.cli import main

RESNET = Path(hw.__file__).parent / "topologies" / "resnet18.csv"
PART = str(Path(__file__).parent / "fixtures" / "topologies" / "resnet18_part.csv")


@pytest.fixture(scope="module")
def by_precision():
    layers = hw.read_topology(PART)
    return {p: simulate(layers, array=(16, 16), dataflow="ws", precision=p) for p in PRECISIONS}


def test_a_wider_word_moves_at_least_proportionally_more_dram_bytes(by_precision):
    int8, bf16, fp32 = (by_precision[p].totals for p in ("int8", "bf16", "fp32"))
    # the same SRAM KiB hold fewer wide words, so the words fetched can only grow with the width
    assert bf16.dram_bytes >= 2 * int8.dram_bytes
    assert fp32.dram_bytes >= 2 * bf16.dram_bytes
    assert int8.macs == bf16.macs == fp32.macs


def test_energy_per_mac_and_per_access_follow_the_precision_table(by_precision):
    for name, report in by_precision.items():
        p, e, t = PRECISIONS[name], report.totals.energy, report.totals
        assert e.unit == "pJ"
        assert e.mac == pytest.approx(t.macs * p.mac_pj)
        table = report.energy_table
        assert table.dram / table.register == pytest.approx(200.0)   # Eyeriss's ratio, at every width
        assert table.register == pytest.approx(0.75 * p.operand_bytes)
    per_mac = {name: r.totals.energy.total / r.totals.macs for name, r in by_precision.items()}
    assert per_mac["int8"] < per_mac["bf16"] < per_mac["fp32"]


def test_a_preset_keeps_its_dram_bytes_per_cycle():
    eyeriss = hw.preset("eyeriss")                                    # 2-byte words
    int8 = hw.make_array(preset="eyeriss", precision="int8")
    fp32 = hw.make_array(preset="eyeriss", precision="fp32")
    bytes_per_cycle = eyeriss.dram_words_per_cycle * eyeriss.word_bytes
    assert int8.word_bytes == 1 and int8.dram_words_per_cycle * 1 == pytest.approx(bytes_per_cycle)
    assert fp32.word_bytes == 4 and fp32.dram_words_per_cycle * 4 == pytest.approx(bytes_per_cycle)
    given = hw.make_array(preset="eyeriss", precision="fp32", dram_words_per_cycle=3.0)
    assert given.dram_words_per_cycle == 3.0                          # given: words of that precision


def test_bad_precisions_are_named():
    with pytest.raises(AccelConfigError, match="precision must be one of int8, bf16, fp32, got 'fp8'"):
        hw.make_array(precision="fp8")
    with pytest.raises(AccelConfigError, match="precision int8 has 1-byte words, not word_bytes=2"):
        hw.make_array(precision="int8", word_bytes=2)
    with pytest.raises(AccelConfigError, match="precision bf16 has 2-byte operands, but word_bytes is 4"):
        ArrayConfig(precision="bf16", word_bytes=4)


def test_tpu_v1_cannot_hold_a_bf16_weight_tile():
    # its 256 KiB weight FIFO holds 256 x 256 int8 weights twice over, but not bf16 ones
    layers = hw.read_topology(RESNET)
    assert simulate(layers, preset="tpu-v1", precision="int8").totals.cycles > 0
    with pytest.raises(SramTooSmallError, match="Conv"):
        simulate(layers, preset="tpu-v1", precision="bf16")


def test_cli_takes_a_precision(capsys):
    assert main(["-t", PART, "--array", "16x16", "--precision", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "bf16 2-byte words" in out
    assert "energy (pJ)" in out and "per MAC" in out

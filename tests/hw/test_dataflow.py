"""Closed-form fold plans, cycles and SRAM traffic (tensorkiln/hw/dataflow.py)."""
from __future__ import annotations

import pytest

from tensorkiln.hw.dataflow import plan_folds, sram_traffic, sram_window
from tensorkiln.hw.errors import AccelConfigError
from tensorkiln.hw.layer import Gemm, Layer


def test_weight_stationary_matches_a_hand_checked_scalesim_run():
    # SCALE-Sim 3.0, 8x8 ws, layer "L1, 10, 10, 3, 3, 4, 12, 1,": Total Cycles 859,
    # mapping 67.5 %, compute util 46.4516 %, SRAM reads 4608 / 432, writes 3840.
    layer = Layer("L1", 10, 10, 3, 3, 4, 12)
    g = layer.gemm_dims
    assert (g.m, g.n, g.k) == (64, 12, 36)
    plan = plan_folds(g, 8, 8, "ws")
    assert (plan.row_folds, plan.col_folds) == (5, 2)
    assert plan.compute_cycles == 859
    assert plan.mapping_efficiency == pytest.approx(0.675)
    assert plan.compute_utilization == pytest.approx(0.4645161290322581)
    t = sram_traffic(g, plan)
    assert (t.ifmap_reads, t.filter_reads, t.scalesim_ofmap_writes) == (4608, 432, 3840)
    w = sram_window(plan, layer)
    assert (w.ifmap_start, w.ifmap_stop, w.filter_start, w.filter_stop, w.ofmap_start,
            w.ofmap_stop) == (9, 849, 1, 782, 15, 855)


@pytest.mark.parametrize("df,per_fold", [("ws", lambda r, c, t: 2 * r + c + t - 2),
                                         ("os", lambda r, c, t: r + c + t - 2),
                                         ("is", lambda r, c, t: 2 * r + c + t - 2)])
def test_cycles_are_folds_times_fold_length_minus_one(df, per_fold):
    g = Gemm(m=100, n=70, k=45)
    plan = plan_folds(g, 16, 8, df)
    sr, sc, t = {"ws": (45, 70, 100), "os": (100, 70, 45), "is": (45, 100, 70)}[df]
    assert (plan.sr, plan.sc, plan.t) == (sr, sc, t)
    folds = -(-sr // 16) * -(-sc // 8)
    assert plan.compute_cycles == folds * per_fold(16, 8, t) - 1


def test_a_gemm_that_fits_the_array_takes_one_fold():
    plan = plan_folds(Gemm(m=4, n=3, k=7), 4, 4, "os")
    assert plan.folds == 1
    assert plan.compute_cycles == 4 + 4 + 7 - 2 - 1
    assert plan.mapping_efficiency == pytest.approx(4 * 3 / 16)


def test_sram_traffic_reuse_pattern_per_dataflow():
    g = Gemm(m=50, n=20, k=30)
    ws = sram_traffic(g, plan_folds(g, 8, 8, "ws"))          # rf=4, cf=3
    assert (ws.ifmap_reads, ws.filter_reads, ws.ofmap_writes, ws.ofmap_reads) == \
        (3 * 50 * 30, 30 * 20, 4 * 50 * 20, 3 * 50 * 20)
    os_ = sram_traffic(g, plan_folds(g, 8, 8, "os"))         # rf=7, cf=3
    assert (os_.ifmap_reads, os_.filter_reads, os_.ofmap_writes) == (3 * 50 * 30, 7 * 30 * 20,
                                                                     50 * 20)
    assert os_.scalesim_ofmap_writes == 50 * 20 + 21 * 16   # SCALE-Sim adds R + C per fold
    is_ = sram_traffic(g, plan_folds(g, 8, 8, "is"))         # rf=4, cf=7
    assert (is_.ifmap_reads, is_.filter_reads, is_.ofmap_writes) == (30 * 50, 7 * 20 * 30,
                                                                     4 * 20 * 50)


def test_unknown_dataflow_is_refused():
    with pytest.raises(AccelConfigError, match="dataflow must be one of"):
        plan_folds(Gemm(1, 1, 1), 4, 4, "rs")


def test_scalesim_ceil_output_formula_and_edge_addresses():
    # 14x14 input, 1x1 filter, stride 2: SCALE-Sim computes ceil(15/2) = 8 output rows,
    # the last of which reads past the input; those addresses are never requested.
    layer = Layer("edge", 14, 14, 1, 1, 4, 8, 2, 2)
    assert layer.ofmap_h == 8
    plan = plan_folds(layer.gemm_dims, 4, 4, "ws")
    plain = sram_window(plan)
    edged = sram_window(plan, layer)
    assert edged.ifmap_stop < plain.ifmap_stop
    assert edged.filter_stop == plain.filter_stop

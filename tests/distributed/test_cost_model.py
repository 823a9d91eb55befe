"""The alpha-beta model (distributed/cost_model.py) and parameter sharding (nn/parallel/sharding.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorkiln.distributed.cost_model import (Network, all_reduce_seconds, amdahl_serial_fraction, fit_alpha_beta,
                                               predict_data_parallel_step, ring_all_reduce_seconds,
                                               tree_all_reduce_seconds)
from tensorkiln.nn.parallel.sharding import Shard


def test_a_stated_link_in_alpha_and_beta():
    net = Network.from_link(100, 2.0)
    assert net.alpha == pytest.approx(2e-6) and net.bandwidth == pytest.approx(12.5e9)
    assert net.message_seconds(12.5e9) == pytest.approx(1 + 2e-6)


def test_ring_and_tree_all_reduce_terms():
    net = Network(alpha=1e-6, beta=1e-9)
    n = 4e6
    assert ring_all_reduce_seconds(n, 8, net) == pytest.approx(2 * 7 * 1e-6 + 2 * 7 / 8 * n * 1e-9)
    assert tree_all_reduce_seconds(n, 8, net) == pytest.approx(2 * 3 * (1e-6 + n * 1e-9))
    assert tree_all_reduce_seconds(n, 5, net) == pytest.approx(2 * 3 * (1e-6 + n * 1e-9))  # ceil(log2 5)
    assert all_reduce_seconds(n, 8, net) == ring_all_reduce_seconds(n, 8, net)  # large: the ring
    assert all_reduce_seconds(8, 1024, net) == tree_all_reduce_seconds(8, 1024, net)  # small, many: the tree
    assert all_reduce_seconds(n, 1, net) == 0.0


def test_fit_recovers_alpha_and_beta():
    rng = np.random.default_rng(0)
    sizes = 8 * 4 ** np.arange(10)
    for alpha, beta in [(2e-6, 1e-10), (5e-5, 3e-9)]:
        times = alpha + sizes * beta
        net = fit_alpha_beta(sizes, times * (1 + 1e-9 * rng.standard_normal(len(sizes))))
        assert net.alpha == pytest.approx(alpha, rel=1e-4) and net.beta == pytest.approx(beta, rel=1e-4)
    with pytest.raises(ValueError, match="two message sizes"):
        fit_alpha_beta([8, 8], [1e-6, 1e-6])


def test_step_prediction_and_amdahl():
    net = Network(alpha=1e-5, beta=1e-9)
    step = predict_data_parallel_step(0.01, [1000, 2000], 4, net)
    assert step.communication_seconds == pytest.approx(all_reduce_seconds(1000, 4, net) +
                                                       all_reduce_seconds(2000, 4, net))
    assert step.efficiency == pytest.approx(0.01 / step.step_seconds)
    # speedup 1 / (s + (1 - s) / p), inverted
    for s, p in [(0.1, 2), (0.05, 16)]:
        assert amdahl_serial_fraction(1 / (s + (1 - s) / p), p) == pytest.approx(s)
    with pytest.raises(ValueError):
        amdahl_serial_fraction(1.0, 1)


@pytest.mark.parametrize("shape,axis,parts,interleave", [
    ((6, 4), 0, 2, 1), ((5, 4), 0, 2, 1), ((3, 12), 1, 2, 3), ((7, 9, 2), 1, 4, 1), ((1, 30), 1, 3, 3),
    ((11,), 0, 3, 1), ((4, 1), 0, 1, 1)])
def test_shards_join_back_into_the_full_parameter(shape, axis, parts, interleave):
    full = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    spec = Shard(axis, parts, shape[axis], interleave)
    if shape[axis] % interleave:
        return
    pieces = [spec.split(full, r) for r in range(parts)]
    assert all(p.shape[axis] == spec.size for p in pieces)
    assert spec.size * parts >= shape[axis] and spec.size * parts - shape[axis] < parts * interleave
    np.testing.assert_array_equal(spec.join(pieces), full)


def test_an_interleaved_shard_holds_its_heads_of_each_block():
    # a fused q|k|v weight (in=2, 3 blocks of 4 columns) over 2 ranks: rank r keeps columns 2r..2r+1 of each
    full = np.arange(24).reshape(2, 12)
    shard = Shard(1, 2, 12, interleave=3).split(full, 1)
    np.testing.assert_array_equal(shard, full[:, [2, 3, 6, 7, 10, 11]])
    with pytest.raises(Exception, match="expected 12"):
        Shard(1, 2, 12, 3).split(full[:, :10], 0)
    assert math.isclose(Shard(0, 4, 50257).padded_size, 50260)


def test_bucket_size_balances_latency_against_the_last_buckets_bytes():
    from tensorkiln.distributed.cost_model import bucket_bytes_for
    net = Network(alpha=5e-6, beta=1e-10)  # half bandwidth at 50 KB
    assert bucket_bytes_for(2e6, net) == math.ceil(2e6 / round(2e6 / math.sqrt(2e6 * 5e4)))  # 6 even buckets
    assert bucket_bytes_for(24e3, net) == 24000  # less than the half-bandwidth size: one bucket
    assert bucket_bytes_for(6e4, net) == 60000  # sqrt(N alpha / beta) > N: one bucket
    # the chosen size minimizes N beta / B + B alpha over whole numbers of buckets, within one bucket
    total = 8e6
    best_count = min(range(1, 200), key=lambda b: total * net.beta / b + b * net.alpha)
    assert abs(total / bucket_bytes_for(total, net) - best_count) <= 1

    # without background progress each bucket's bytes move at its wait: one bucket, whatever the size
    for total in (1.0, 24e3, 2e6, 8e6 + 1):
        assert bucket_bytes_for(total, net, background_progress=False) == math.ceil(total)


def test_overlapped_step_timeline():
    from tensorkiln.distributed.cost_model import TimelineEvent as E, predict_overlapped_step
    net = Network(alpha=1e-3, beta=1e-9)
    latency, transfer = 2e-3, 2e-3  # 2 ranks: 2 alpha, and 2 * 1/2 * n beta for n = 2 MB
    n = 2e6
    assert all_reduce_seconds(n, 2, net) == pytest.approx(latency + transfer)
    # started before 5 ms of compute: the latency is hidden; the bytes move at the wait (own core)
    events = [E("start", key="a", nbytes=n), E("compute", 5e-3), E("wait", key="a")]
    assert predict_overlapped_step(events, 2, net) == pytest.approx(5e-3 + transfer)
    # ... or in the background, all hidden
    assert predict_overlapped_step(events, 2, net, background_progress=True) == pytest.approx(5e-3)
    # started right before its wait: nothing hidden, as the model without overlap says
    late = [E("compute", 5e-3), E("start", key="a", nbytes=n), E("wait", key="a")]
    no_overlap = predict_data_parallel_step(5e-3, [n], 2, net).step_seconds
    for background in (False, True):
        assert predict_overlapped_step(late, 2, net, background) == pytest.approx(no_overlap)
    # two buckets in the background share one channel: the second waits for the first's bytes
    two = [E("start", key="a", nbytes=n), E("start", key="b", nbytes=n), E("compute", 1e-3), E("wait", key="a"),
           E("wait", key="b")]
    assert predict_overlapped_step(two, 2, net, True) == pytest.approx(latency + 2 * transfer)
    # each runtime call costs its own time
    assert predict_overlapped_step(late, 2, net, call_seconds=1e-4) == pytest.approx(no_overlap + 2e-4)


def test_overlapped_step_of_every_ranks_timeline():
    from tensorkiln.distributed.cost_model import TimelineEvent as E, predict_overlapped_ranks, predict_overlapped_step
    net = Network(alpha=1e-3, beta=1e-9)
    n, latency, transfer = 2e6, 2e-3, 2e-3
    cases = [[E("start", key="a", nbytes=n), E("compute", 5e-3), E("wait", key="a")],
             [E("compute", 5e-3), E("start", key="a", nbytes=n), E("wait", key="a"), E("compute", 1e-3)],
             [E("start", key="a", nbytes=n), E("start", key="b", nbytes=n), E("compute", 1e-3), E("wait", key="a"),
              E("compute", 2e-3), E("wait", key="b")]]
    for events in cases:  # ranks with the same timeline: the one-timeline model
        for background in (False, True):
            for call in (0.0, 1e-4):
                assert predict_overlapped_ranks([events] * 2, net, background, call) == pytest.approx(
                    predict_overlapped_step(events, 2, net, background, call))
    # a rank 3 ms slower before the wait: the wait lasts for it, then the bytes move
    slow = [E("compute", 3e-3), *cases[0]]
    assert predict_overlapped_ranks([cases[0], slow], net) == pytest.approx(8e-3 + transfer)
    # ... and where the bytes move in the background they are through by then
    assert predict_overlapped_ranks([cases[0], slow], net, background_progress=True) == pytest.approx(8e-3)
    # rank 1 starts late: the latency runs from its start
    late = [E("compute", 9e-3), E("start", key="a", nbytes=n), E("wait", key="a")]
    assert predict_overlapped_ranks([cases[0], late], net) == pytest.approx(9e-3 + latency + transfer)
    with pytest.raises(ValueError, match="different collectives"):
        predict_overlapped_ranks([cases[2], [*cases[2][:2], E("wait", key="b"), E("wait", key="a")]], net)

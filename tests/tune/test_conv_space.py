"""The convolution's search space: algorithm, NCHWc tile and task order; every candidate computes the layer."""
from __future__ import annotations

import json
import random

import pytest

from tensorkiln.kernels.templates.conv_choice import (ConvConfig, ConvShape, analytic_conv_config, conv_config,
                                                      conv_workload, shape_of_workload)
from tensorkiln.kernels.templates.spaces import space_of
from tensorkiln.kernels.target import cpu_target
from tensorkiln.kernels.templates.conv_shallow import shallow_tile
from tensorkiln.kernels.tuned import config_of, record_table, target_key, tuning_log, using_configs
from tensorkiln.runtime.tuning_records import TuningRecord, append_record, read_records
from tensorkiln.tune.worker import check
from tensorkiln.tune.workloads import benchmark_of


@pytest.fixture
def records(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(path))
    return path


def random_layer(rng, constant: bool = True) -> ConvShape:
    """A small layer with odd sizes: row tails on every tile, size-1 batch or kernel sides sometimes."""
    kh, kw = (int(v) for v in rng.choice([1, 3], 2)) if rng.random() < 0.5 else (3, 3)
    stride = (1, 1) if rng.random() < 0.6 else (2, 2)
    pad = (kh // 2, kh // 2, kw // 2, kw // 2) if rng.random() < 0.8 else (0, 0, 0, 0)
    return ConvShape(int(rng.integers(1, 3)), int(rng.choice([8, 16, 24, 40])), int(rng.integers(9, 23)),
                     int(rng.integers(9, 23)), int(rng.choice([16, 32, 48])), kh, kw, stride, pad, (1, 1), constant)


def test_workload_keys_round_trip(rng):
    for constant in (True, False):
        shape = random_layer(rng, constant)
        assert shape_of_workload(conv_workload(shape)) == shape


def test_space_holds_the_analytic_choice_and_no_record_means_the_default(records, rng):
    shape = ConvShape(1, 64, 28, 28, 128, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), True)
    space = space_of(conv_workload(shape))
    default = config_of(analytic_conv_config(shape))
    assert space.default == default and space.contains(default)
    assert {"nchwc", "winograd4", "winograd2", "gemm_rows"} <= set(space.knobs["algorithm"])
    assert space.size > 100
    bench = benchmark_of(conv_workload(shape))  # no record on file: the rule's choice, said so in the comment
    uses = [use for kernel in bench.build(None).report(*bench.inputs).kernels for use in kernel.tuning]
    shown = " ".join(f"{k}={v}" for k, v in default.items() if not k.startswith("shallow_"))  # quiet at 0
    assert f"{conv_workload(shape)} default: {shown}" in uses


def test_samples_are_legal_and_nchw_algorithms_keep_one_tile(rng):
    space = space_of(conv_workload(random_layer(rng)))
    points = [space.sample(random.Random(i)) for i in range(40)]
    points += [space.mutate(p, random.Random(7)) for p in points[:10]]
    assert all(space.contains(p) for p in points)
    for p in points:
        if p["algorithm"] != "nchwc":
            assert (p["pixels"], p["blocks"], p["order"]) == (space.default["pixels"], space.default["blocks"],
                                                              space.default["order"])


def test_every_knob_computes_the_layer(rng):
    """Random layers, and for each the default, every algorithm and random NCHWc tiles and orders."""
    for constant in (True, True, False):
        shape = random_layer(rng, constant)
        key = conv_workload(shape)
        space, bench = space_of(key), benchmark_of(key)
        picks = [space.default] + [{**space.default, "algorithm": a} for a in space.knobs["algorithm"]
                                   if a != space.default["algorithm"]]
        if "nchwc" in space.knobs["algorithm"]:
            picks += [space.fix({**space.sample(random.Random(i)), "algorithm": "nchwc"}) for i in range(2)]
        asked = True
        for config in picks:
            config = space.fix(config)
            fn = bench.build(config)
            assert check(fn, bench) is None, (key, config)
            with using_configs({key: config}):  # the kernels' comments say which configuration they got
                uses = [use for kernel in fn.report(*bench.inputs).kernels for use in kernel.tuning]
            if config == space.default:  # a layer too small for the templates never asks
                asked = any(use.startswith(key) for use in uses)
            elif asked:
                assert any(use.startswith(f"{key} tuned:") for use in uses), (key, config, uses)


def test_records_of_a_layer_round_trip_and_an_illegal_one_is_ignored(records):
    shape = ConvShape(1, 32, 14, 14, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), False)  # probe(): weight an input
    key = conv_workload(shape)
    tuned = {"algorithm": "gemm", "pixels": 3, "blocks": 2, "order": "groups"}  # a tile that fits 16 registers
    append_record(TuningRecord(key, target_key(), tuned, 1.0, 2.0, 8))
    assert read_records()[0].config == tuned and record_table().best[key] == tuned
    assert json.loads(records.read_text())["config"] == tuned
    with using_configs({key: {**tuned, "blocks": 3}}), tuning_log() as log:  # 3 does not divide 64 / 16
        assert conv_config(shape.probe()) == analytic_conv_config(shape)
    assert "not a legal configuration" in log[0].source
    for algorithm in ("nonesuch", "nchwc"):  # a weight that is not a constant cannot be blocked
        with using_configs({key: {**tuned, "algorithm": algorithm}}):
            assert conv_config(shape.probe()) == analytic_conv_config(shape)
    with using_configs({key: tuned}):
        assert conv_config(shape.probe()) == ConvConfig(**tuned)


def test_the_shallow_tile_is_searched_and_every_size_computes_the_layer(rng):
    """Layers of 1 to 4 input channels (the stem's kind), odd sizes: random shallow tiles against the reference."""
    for _ in range(2):
        k = int(rng.choice([5, 12, 24, 40]))
        kh = int(rng.choice([3, 5, 7]))
        shape = ConvShape(1, int(rng.integers(1, 5)), int(rng.integers(11, 40)), int(rng.integers(11, 40)), k, kh, kh,
                          (2, 2) if rng.random() < 0.5 else (1, 1), (kh // 2,) * 4, (1, 1), False)
        key = conv_workload(shape)
        space, bench = space_of(key), benchmark_of(key)
        assert space.default["algorithm"] == "shallow"
        assert space.default["shallow_channels"] == space.default["shallow_vectors"] == 0  # the rule's tile
        assert len(space.knobs["shallow_channels"]) > 2 and len(space.knobs["shallow_vectors"]) > 2
        picks = {space.key(p): p for p in (space.fix({**space.sample(random.Random(i)), "algorithm": "shallow"})
                                           for i in range(6)) if p is not None}
        assert len(picks) > 1
        codes = set()
        for config in picks.values():
            assert space.contains(config)
            fn = bench.build(config)
            assert check(fn, bench) is None, (key, config)
            with open(fn.report(*bench.inputs).source_path) as source:  # the tile reaches the C, not only its comment
                codes.add("\n".join(line for line in source.read().splitlines() if "tuning:" not in line))
            if config["shallow_channels"] or config["shallow_vectors"]:
                with using_configs({key: config}):
                    uses = [use for kernel in fn.report(*bench.inputs).kernels for use in kernel.tuning]
                assert any(f"shallow_channels={config['shallow_channels']}" in use for use in uses), uses
        assert len(codes) > 1


def test_shallow_sizes_belong_to_the_shallow_kernel_alone():
    stem = ConvShape(1, 3, 64, 64, 16, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), False)
    key = conv_workload(stem)
    space = space_of(key)
    assert space.fix({**space.default, "algorithm": "gemm", "shallow_channels": 4, "shallow_vectors": 2})[
        "shallow_channels"] == 0  # another algorithm: the sizes mean nothing, so they are zero
    with using_configs({key: {**space.default, "algorithm": "gemm", "shallow_channels": 4}}), tuning_log() as log:
        assert conv_config(stem.probe()) == analytic_conv_config(stem)  # such a record is not legal
    assert "not a legal configuration" in log[0].source
    target = cpu_target()
    too_large = {**space.default, "shallow_channels": 16, "shallow_vectors": 8}  # 16 x 8 accumulators
    assert not space.contains(too_large)
    lanes = target.vector_bytes // 4
    rule = shallow_tile(16, stem.out_hw[1], lanes, target.vector_registers, tasks_per_tile_row=stem.out_hw[0])
    same = {**space.default, "shallow_channels": rule.channels, "shallow_vectors": rule.vectors}
    assert space.contains(same)  # the rule's own sizes, named: legal

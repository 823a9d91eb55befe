"""Tuning records: an append-only, untrusted JSON-lines file that later compiles read by themselves."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.kernels.templates.gemm import analytic_gemm_blocking, gemm_workload
from tensorkiln.kernels.tuned import config_of, record_table, target_key
from tensorkiln.runtime.tuning_records import TuningRecord, append_record, read_records, records_path

M, N, K = 96, 80, 72
KEY = gemm_workload(M, N, K, "float32")
TUNED = {"mr": 6, "nr": 16, "kc": 72, "mc": 48, "nc": 32, "split": "cols"}


@pytest.fixture
def records(tmp_path, monkeypatch):
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("TENSORKILN_TUNING_RECORDS", str(path))
    return path


def record(config=TUNED, seconds=1.0, default=2.0, target=None, workload=KEY) -> TuningRecord:
    return TuningRecord(workload, target or target_key(), config, seconds, default, 8)


def test_round_trip_and_append_only(records):
    assert records_path() == records
    append_record(record())
    first = records.read_text()
    append_record(record(seconds=0.5))
    assert records.read_text().startswith(first)  # appended, never rewritten
    read = read_records()
    assert [r.seconds for r in read] == [1.0, 0.5]
    assert read[0].config == TUNED and read[0].workload == KEY and read[0].when
    assert record_table().best[KEY] == TUNED


def test_best_record_wins_and_the_default_wins_ties(records):
    append_record(record(config={**TUNED, "mc": 96}, seconds=1.5))
    append_record(record(seconds=1.0))
    append_record(record(config={**TUNED, "mc": 24}, seconds=0.9, default=0.9))  # a tie: not faster
    assert record_table().best[KEY] == TUNED
    assert record_table().slower == 1


@pytest.mark.parametrize("line", [
    "not json at all",
    '{"version": 1}',
    '{"__class__": "os.system", "args": ["touch /tmp/pwned"]}',
    json.dumps({"version": 1, "workload": KEY, "target": "x", "config": {"mr": "__import__('os')"},
                "seconds": 1, "default_seconds": 2, "trials": 1, "when": ""}),
    json.dumps({"version": 1, "workload": KEY, "target": "x", "config": {"mr": 8}, "seconds": float("nan"),
                "default_seconds": 2, "trials": 1, "when": ""}),
    "[" * 100000,
])
def test_a_corrupt_or_malicious_line_is_skipped_with_a_warning(records, line):
    append_record(record())
    with open(records, "a") as f:
        f.write(line + "\n")
    append_record(record(seconds=0.5))
    with pytest.warns(UserWarning, match=r"records.jsonl:2: tuning record skipped"):
        read = read_records()
    assert [r.seconds for r in read] == [1.0, 0.5]


def test_compiles_use_records_and_never_share_a_cache_entry_with_untuned_builds(records, rng):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    untuned = tk.jit(lambda x, y: x @ y)
    before = untuned.report(a, b).kernels[0]
    append_record(record())
    tuned = tk.jit(lambda x, y: x @ y)
    out = tuned(a, b).numpy()
    after = tuned.report(a, b).kernels[0]
    assert after.tuning == [f"{KEY} tuned: " + " ".join(f"{k}={v}" for k, v in TUNED.items())]
    assert before.tuning[0].startswith(f"{KEY} default:")
    assert after.loop_ir != before.loop_ir
    assert tuned.report(a, b).library_path != untuned.report(a, b).library_path
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert "tuned" in str(tuned.profile(a, b, repeat=1))
    assert f"{KEY} tuned" in tuned.explain(a, b)


def test_records_measured_under_another_wait_policy_are_ignored(records, monkeypatch):
    """Which configuration wins depends on how OpenMP's idle threads wait: a record measured with
    passive threads is not used where they spin, and the other way round."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "passive")
    passive = target_key()
    append_record(record())
    assert passive.endswith("|omp_wait=passive") and record_table().best[KEY] == TUNED
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert target_key().endswith("|omp_wait=default") and target_key() != passive
    table = record_table()
    assert KEY not in table.best and table.foreign == 1
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE ")  # read as libgomp reads it: any case, spaces around
    assert target_key().endswith("|omp_wait=active") and KEY not in record_table().best


def test_records_of_another_machine_are_ignored_with_a_note(records, rng):
    append_record(record(target="Some Other CPU|CpuTarget(vector_bytes=32, ...)|threads=64"))
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    f = tk.jit(lambda x, y: x @ y)
    assert f.report(a, b).kernels[0].tuning[0].startswith(f"{KEY} default:")
    text = f.explain(a, b)
    assert "1 record(s) measured on another machine ignored" in text
    assert config_of(analytic_gemm_blocking(M, N, K, "float32")) != TUNED

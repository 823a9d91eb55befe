"""The cache's size limit: after a build, the least recently used entries go until it fits."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from tensorkiln.codegen.c import generate_c
from tensorkiln.errors import TensorKilnError
from tensorkiln.runtime.c_compiler import compile_c
from tensorkiln.runtime.cache_usage import cache_info, clear_cache, enforce_size_limit, max_cache_bytes

from test_compiler import scale_program


def _age(path: Path, seconds_ago: float) -> None:
    stamp = time.time() - seconds_ago
    os.utime(path, (stamp, stamp))


def test_the_least_recently_used_library_is_evicted_after_a_build(tmp_path, monkeypatch):
    sources = [generate_c(scale_program(factor, name=f"lru{i}")).text for i, factor in enumerate((2.0, 3.0, 4.0))]
    first, second = (compile_c(s, cache=tmp_path) for s in sources[:2])
    _age(Path(first.path).parent, 300)
    _age(Path(second.path).parent, 200)
    assert compile_c(sources[0], cache=tmp_path).cache_hit  # a hit makes the first the most recent
    entry_bytes = cache_info(tmp_path).total_bytes // 2
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", str(int(entry_bytes * 2.5)))
    third = compile_c(sources[2], cache=tmp_path)
    assert not third.cache_hit
    assert Path(first.path).exists() and Path(third.path).exists()
    assert not Path(second.path).parent.exists()
    assert cache_info(tmp_path).libraries == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_the_entry_just_built_is_kept_even_over_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", "1")
    old = compile_c(generate_c(scale_program(5.0, name="old")).text, cache=tmp_path)
    new = compile_c(generate_c(scale_program(6.0, name="new")).text, cache=tmp_path)
    assert Path(new.path).exists() and not Path(old.path).exists()


def test_graph_records_are_evicted_too_and_others_files_are_left(tmp_path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    record = graphs / ("c" * 64 + ".json")
    record.write_text("{}" * 100)
    (tmp_path / "someone-elses-data").write_text("x" * 1000)
    kept = tmp_path / ("d" * 64)
    kept.mkdir()
    (kept / "module.so").write_bytes(b"\0" * 100)
    assert enforce_size_limit(tmp_path, keep=kept, limit=150) == [record]
    assert (tmp_path / "someone-elses-data").exists()


def test_zero_means_no_limit_and_nonsense_is_an_error(monkeypatch):
    monkeypatch.delenv("TENSORKILN_CACHE_MAX_BYTES", raising=False)
    assert max_cache_bytes() >= 1 << 30
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", "0")
    assert max_cache_bytes() == 0
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", "lots")
    with pytest.raises(TensorKilnError, match="TENSORKILN_CACHE_MAX_BYTES"):
        max_cache_bytes()


def test_clear_removes_what_tensorkiln_keeps(tmp_path):
    compile_c(generate_c(scale_program(8.0, name="cleared")).text, cache=tmp_path)
    (tmp_path / "someone-elses-data").write_text("kept")
    removed = clear_cache(tmp_path)
    assert removed.libraries == 1 and removed.total_bytes > 0
    after = cache_info(tmp_path)
    assert (after.libraries, after.graphs, after.total_bytes) == (0, 0, 0)
    assert (tmp_path / "someone-elses-data").read_text() == "kept"
    np.testing.assert_equal(len([p for p in tmp_path.iterdir() if len(p.name) == 64]), 0)


def test_builds_under_the_limit_do_not_scan_the_cache(tmp_path, monkeypatch):
    """The size estimate spares a scan of every entry per build; one over the limit scans and evicts."""
    from tensorkiln.runtime import cache_usage
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", str(1 << 30))
    compile_c(generate_c(scale_program(7.0, name="first")).text, cache=tmp_path)  # no estimate yet: one scan
    scans = []
    real = cache_usage.cache_items
    monkeypatch.setattr(cache_usage, "cache_items", lambda root: scans.append(root) or real(root))
    compile_c(generate_c(scale_program(8.0, name="second")).text, cache=tmp_path)
    assert scans == []
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_BYTES", "1")
    third = compile_c(generate_c(scale_program(9.0, name="third")).text, cache=tmp_path)
    assert scans and cache_info(tmp_path).libraries == 1 and Path(third.path).exists()

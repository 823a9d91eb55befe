"""`tensorkiln cache info` and `tensorkiln cache clear`."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.runtime import fastcall
from tensorkiln.tools.cache import human_bytes
from tensorkiln.tools.cli import main


@pytest.fixture
def cache(tmp_path, monkeypatch):
    # The warm-call extension is built once per process into whichever cache is current: build it
    # before switching, so the counts below are the program's alone whatever ran before.
    fastcall.extension()
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _info(capsys) -> dict[str, str]:
    assert main(["cache", "info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in lines)}


def test_info_counts_libraries_and_graph_records(cache, capsys):
    assert _info(capsys)["libraries"] == "0"
    tk.jit(lambda t: t * 4 - 3)(np.ones((3, 2), np.float32))
    info = _info(capsys)
    assert info["location"] == str(cache)
    assert info["libraries"] == "1" and info["graph records"] == "1"
    assert info["total size"].split()[1] in ("KiB", "MiB") and "TENSORKILN_CACHE_MAX_BYTES" in info["total size"]


def test_clear_empties_the_cache(cache, capsys):
    x = np.ones((3, 2), np.float32)
    tk.jit(lambda t: t * 4 + 3)(x)
    assert main(["cache", "clear"]) == 0
    assert "removed 1 libraries, 1 graph records" in capsys.readouterr().out
    info = _info(capsys)
    assert (info["libraries"], info["graph records"], info["total size"].split()[:2]) == ("0", "0", ["0", "B"])
    np.testing.assert_array_equal(tk.jit(lambda t: t * 4 + 3)(x).numpy(), x * 4 + 3)  # rebuilt


def test_cache_is_listed_in_the_help(capsys):
    main([])
    assert "cache" in capsys.readouterr().out


def test_human_bytes():
    assert [human_bytes(n) for n in (0, 1536, 3 << 30)] == ["0 B", "1.5 KiB", "3.0 GiB"]

"""The cache root: private directories, an unusable root falls back, an insecure one is refused."""
from __future__ import annotations

import errno
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.errors import TensorKilnError
from tensorkiln.runtime import cache_root
from tensorkiln.runtime.cache_root import inside, is_digest, usable_root


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _jit_add_one(offset: float) -> np.ndarray:
    """Compile and run a small graph (a new constant each time, so each is a new compile)."""
    x = np.ones((2, 3), np.float32)
    return tk.jit(lambda t: t + offset)(x).numpy()


def test_a_regular_file_as_cache_falls_back_with_one_warning(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TENSORKILN_CACHE", str(blocker))
    with pytest.warns(RuntimeWarning, match="TENSORKILN_CACHE") as caught:
        np.testing.assert_array_equal(_jit_add_one(1.5), np.full((2, 3), 2.5, np.float32))
    assert len([w for w in caught if "TENSORKILN_CACHE" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning came once: later compiles are silent
        np.testing.assert_array_equal(_jit_add_one(2.5), np.full((2, 3), 3.5, np.float32))
    fallback = usable_root(blocker)
    assert fallback != blocker and any(fallback.iterdir())


def test_an_unwritable_home_falls_back(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.delenv("TENSORKILN_CACHE")
    monkeypatch.setenv("HOME", str(home))
    real_mkdir = os.mkdir

    def read_only_home(path, *args, **kwargs):  # what a read-only file system answers (even to root)
        if str(path).startswith(str(home)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only_home)
    with pytest.warns(RuntimeWarning, match="TENSORKILN_CACHE"):
        np.testing.assert_array_equal(_jit_add_one(3.5), np.full((2, 3), 4.5, np.float32))
    assert not (home / ".cache").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_a_read_only_cache_directory_falls_back(tmp_path, monkeypatch):
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o500)
    monkeypatch.setenv("TENSORKILN_CACHE", str(read_only))
    with pytest.warns(RuntimeWarning, match="TENSORKILN_CACHE"):
        np.testing.assert_array_equal(_jit_add_one(4.5), np.full((2, 3), 5.5, np.float32))


def test_cache_directories_are_private_whatever_the_umask(tmp_path, monkeypatch):
    root = tmp_path / "fresh" / "cache"
    monkeypatch.setenv("TENSORKILN_CACHE", str(root))
    old = os.umask(0)
    try:
        _jit_add_one(5.5)
    finally:
        os.umask(old)
    entries = [p for p in root.iterdir() if is_digest(p.name)]
    assert entries
    for directory in [root, root / "graphs", *entries]:
        assert _mode(directory) == 0o700, directory


def test_a_world_writable_root_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("TENSORKILN_CACHE", str(root))
    with pytest.raises(TensorKilnError, match="writable by every user(.|\n)*TENSORKILN_CACHE"):
        usable_root()
    with pytest.raises(TensorKilnError, match="TENSORKILN_CACHE"):
        _jit_add_one(6.5)


def test_a_root_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE", str(tmp_path))
    monkeypatch.setattr(cache_root.os, "geteuid", lambda: os.stat(tmp_path).st_uid + 1)
    with pytest.raises(TensorKilnError, match="owned by another user(.|\n)*TENSORKILN_CACHE"):
        usable_root()


def test_names_from_disk_must_be_digests_inside_the_root(tmp_path):
    good = "a" * 64
    assert inside(tmp_path, good) == tmp_path / good
    for bad in ("../evil_lib", "A" * 64, "a" * 63, "/etc", "a" * 64 + "/..", 7, None):
        with pytest.raises(ValueError):
            inside(tmp_path, bad)
    outside = tmp_path.parent / "elsewhere"
    outside.mkdir(exist_ok=True)
    (tmp_path / good).symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        inside(tmp_path, good)

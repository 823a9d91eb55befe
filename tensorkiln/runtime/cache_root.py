"""Where the on-disk caches live, and the checks that keep them private and usable.

The cache root is `$TENSORKILN_CACHE`, else `~/.cache/tensorkiln`. Before it is
used it must be a directory this process can write; tensorkiln creates it
(and every directory inside it: graphs/, failed/, locks/, entries) with mode
0700 whatever the umask, since a library found in the cache is loaded and run.

- A root owned by another user, or writable by everyone, is refused with a
  TensorKilnError: whoever can write there chooses the code we load.
- A root that cannot be used (a read-only home, a regular file in the way)
  is not an error: this process falls back to a temporary directory of its
  own (removed at exit), with one warning naming TENSORKILN_CACHE. Compiling
  still works; only the reuse across processes is lost.

Every name read from disk (a graph record's library key, a directory found
while listing the cache) is accepted only as a hex sha256 digest, and every
path made from one must resolve inside the root, so a record cannot point
the loader at a library elsewhere.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import tempfile
import uuid
import warnings
from pathlib import Path

from tensorkiln.errors import TensorKilnError

DIRECTORY_MODE = 0o700
_DIGEST = re.compile(r"[0-9a-f]{64}")
# Configured root -> the temporary root this process uses instead (one warning each).
_fallbacks: dict[Path, Path] = {}


class _Unusable(Exception):
    """The root cannot be used by this process (why, in words); the caller falls back."""


def configured_root() -> Path:
    """The cache root as configured: $TENSORKILN_CACHE, else ~/.cache/tensorkiln (not checked)."""
    configured = os.environ.get("TENSORKILN_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "tensorkiln"


def is_digest(name: object) -> bool:
    """True when `name` is a lower-case hex sha256 digest (the only names the cache gives its files)."""
    return isinstance(name, str) and _DIGEST.fullmatch(name) is not None


def make_private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) if needed; a directory created here gets mode 0700."""
    try:
        path.mkdir(mode=DIRECTORY_MODE)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return make_private_dir(path)
    except FileExistsError:
        if not path.is_dir():
            raise
        return path
    os.chmod(path, DIRECTORY_MODE)  # mkdir's mode is filtered by the umask; chmod is not
    return path


def _check_owner_and_mode(root: Path, info: os.stat_result) -> None:
    """Refuse a root that someone else can write to (it decides which code gets loaded)."""
    if info.st_uid != os.geteuid():
        raise TensorKilnError(
            f"the tensorkiln cache directory {root} is owned by another user (uid {info.st_uid}), so it could "
            f"hand this process a library to run: set TENSORKILN_CACHE to a directory of your own")
    if info.st_mode & stat.S_IWOTH:
        raise TensorKilnError(
            f"the tensorkiln cache directory {root} is writable by every user (mode {stat.filemode(info.st_mode)}), "
            f"so anyone could plant a library there: run `chmod o-w {root}` or set TENSORKILN_CACHE to a "
            f"private directory")


def prepare_root(root: Path) -> Path:
    """`root`, created if missing and checked; raises _Unusable or TensorKilnError (insecure)."""
    try:
        make_private_dir(root)
        info = os.stat(root)
    except OSError as exc:
        raise _Unusable(f"{exc.strerror or exc}") from exc
    _check_owner_and_mode(root, info)
    if not os.access(root, os.W_OK | os.X_OK):
        raise _Unusable("not writable")
    return root


def _fallback_for(root: Path, reason: str) -> Path:
    """This process's temporary cache in place of `root` (made, registered and warned about once)."""
    if root not in _fallbacks:
        temporary = Path(tempfile.mkdtemp(prefix="tensorkiln-cache-"))  # mode 0700, owned by us
        atexit.register(shutil.rmtree, temporary, True)
        _fallbacks[root] = temporary
        warnings.warn(f"tensorkiln: cannot use the cache directory {root} ({reason}); compiled code is cached "
                      f"in {temporary} for this process only. Set TENSORKILN_CACHE to a writable directory "
                      f"to keep it.", RuntimeWarning, stacklevel=3)
    return _fallbacks[root]


def usable_root(root: Path | None = None) -> Path:
    """The cache root to use: `root` (default: the configured one) when usable, else this process's fallback."""
    root = Path(root) if root is not None else configured_root()
    if root in _fallbacks:
        return _fallbacks[root]
    try:
        return prepare_root(root)
    except _Unusable as unusable:
        return _fallback_for(root, str(unusable))


def inside(root: Path, name: str, suffix: str = "") -> Path:
    """root/<name><suffix> for a digest `name`; ValueError unless the name is one and the path stays in root."""
    if not is_digest(name):
        raise ValueError(f"not a cache key: {str(name)[:80]!r}")
    path = root / f"{name}{suffix}"
    if not path.resolve().is_relative_to(root.resolve()):  # a symlinked entry pointing elsewhere
        raise ValueError(f"cache entry {path} resolves outside the cache {root}")
    return path


def remove_aside(path: Path) -> None:
    """Remove a file or directory so that nobody sees it half-deleted: rename it away first, then delete."""
    trash = path.parent / f".trash-{path.name[:16]}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, trash)
    except OSError:
        return  # gone already (another process moved it first)
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)

"""How much the cache holds, emptying it, and keeping it under a size limit (least recently used first).

What tensorkiln owns in a cache root: library entries (directories named by a
sha256), `graphs/<sha256>.json` records, `failed/` (sources the C compiler
rejected), `locks/` and leftovers of interrupted builds (`.build-*`,
`.trash-*`). Anything else found there (someone's data) is neither counted
nor removed.

The limit is `$TENSORKILN_CACHE_MAX_BYTES` (default 4 GiB; 0 turns eviction
off). It is applied after a build that may have crossed it (`after_build`
keeps a running estimate, so most builds scan nothing): while the cache is larger, the item
used least recently goes, a library entry or a graph record alike. "Used" is
the modification time, which a cache hit refreshes (`touch`), so this works
on file systems mounted noatime. A record whose library was evicted is a
miss and is rebuilt; a library evicted between lookup and load fails to load
and is rebuilt too.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from tensorkiln.errors import TensorKilnError

from .cache_root import is_digest, remove_aside

DEFAULT_MAX_BYTES = 4 << 30
MAX_BYTES_VARIABLE = "TENSORKILN_CACHE_MAX_BYTES"
GRAPHS = "graphs"
FAILED = "failed"
LOCKS = "locks"
LEDGER = "size-estimate"  # bytes the cache holds, as last counted plus builds since
DEBRIS_PREFIXES = (".build-", ".trash-", ".entry-")


@dataclass(frozen=True)
class CacheItem:
    """One thing eviction may remove: a library entry, a graph record or a failed build."""

    path: Path
    kind: str          # "library", "graph" or "failed"
    size: int          # bytes on disk (file sizes)
    last_used: float   # modification time, refreshed on every hit


@dataclass(frozen=True)
class CacheInfo:
    """What `tensorkiln cache info` prints."""

    location: Path
    libraries: int
    graphs: int
    failed: int
    total_bytes: int
    max_bytes: int


def touch(path: Path) -> None:
    """Mark `path` as just used (for eviction); a read-only cache only loses the LRU order."""
    try:
        os.utime(path)
    except OSError:
        pass


def max_cache_bytes() -> int:
    """The size limit from $TENSORKILN_CACHE_MAX_BYTES (bytes; 0: no limit), default DEFAULT_MAX_BYTES."""
    text = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise TensorKilnError(f"{MAX_BYTES_VARIABLE}={text!r}: expected a number of bytes (0 for no limit)")
    return value


def _size(path: Path) -> int:
    """Bytes in the files under `path` (symlinks are not followed)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
        return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir() or p.is_symlink())
    except OSError:  # removed while we looked
        return 0


def _item(path: Path, kind: str) -> Optional[CacheItem]:
    try:
        last_used = path.lstat().st_mtime
    except OSError:
        return None
    return CacheItem(path, kind, _size(path), last_used)


def _children(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def cache_items(root: Path) -> Iterator[CacheItem]:
    """Every library entry, graph record and failed build under `root` (names that are not digests skipped)."""
    candidates = [(p, "library") for p in _children(root) if is_digest(p.name) and p.is_dir()]
    candidates += [(p, "graph") for p in _children(root / GRAPHS)
                   if p.suffix == ".json" and is_digest(p.stem)]
    candidates += [(p, "failed") for p in _children(root / FAILED)]
    for path, kind in candidates:
        item = _item(path, kind)
        if item is not None:
            yield item


def cache_info(root: Path) -> CacheInfo:
    """Counts and total size of what tensorkiln keeps under `root`."""
    items = list(cache_items(root))
    count = {kind: sum(1 for i in items if i.kind == kind) for kind in ("library", "graph", "failed")}
    return CacheInfo(root, count["library"], count["graph"], count["failed"], sum(i.size for i in items),
                     max_cache_bytes())


def clear_cache(root: Path) -> CacheInfo:
    """Remove everything tensorkiln keeps under `root` (not the root itself); returns what was there."""
    before = cache_info(root)
    for item in cache_items(root):
        remove_aside(item.path)
    for child in _children(root):
        if child.name.startswith(DEBRIS_PREFIXES):
            shutil.rmtree(child, ignore_errors=True)
    (root / LEDGER).unlink(missing_ok=True)
    return before


def enforce_size_limit(root: Path, keep: Path, limit: Optional[int] = None) -> list[Path]:
    """Remove the least recently used items until `root` holds at most `limit` bytes; never `keep`.

    Returns the removed paths. `limit` defaults to max_cache_bytes() (0: nothing is removed).
    """
    return _evict(root, keep, max_cache_bytes() if limit is None else limit)[0]


def after_build(root: Path, entry: Path, limit: Optional[int] = None) -> list[Path]:
    """Apply the size limit after `entry` was built, scanning the cache only when it may be over it.

    A scan stats every item (about half a second for 20,000 of them), too slow for every build, so
    the root keeps a running estimate of its size (LEDGER): a build adds its entry's size, and only
    an estimate over the limit, or a missing or unreadable one, scans, evicts and writes the exact
    total. Graph records (a few KiB each) are not added, so the estimate errs low until the next scan.
    """
    limit = max_cache_bytes() if limit is None else limit
    if limit <= 0:
        return []
    ledger = root / LEDGER
    try:
        estimate = int(ledger.read_text()) + _size(entry)
    except (OSError, ValueError):
        estimate = None
    if estimate is not None and estimate <= limit:
        _write_ledger(ledger, estimate)
        return []
    removed, total = _evict(root, entry, limit)
    _write_ledger(ledger, total)
    return removed


def _evict(root: Path, keep: Path, limit: int) -> tuple[list[Path], int]:
    """Least recently used first, until at most `limit` bytes remain: (removed paths, bytes left)."""
    items = sorted(cache_items(root), key=lambda i: i.last_used)
    total = sum(i.size for i in items)
    removed = []
    if limit <= 0:
        return removed, total
    for item in items:
        if total <= limit:
            break
        if item.path == keep:
            continue
        remove_aside(item.path)
        total -= item.size
        removed.append(item.path)
    return removed, total


def _write_ledger(ledger: Path, total: int) -> None:
    """Replace the size estimate atomically (a reader sees the old or the new number, never half)."""
    temporary = ledger.with_name(f".entry-ledger-{os.getpid()}")
    try:
        temporary.write_text(str(total))
        os.replace(temporary, ledger)
    except OSError:  # an estimate that cannot be kept only means the next build scans
        pass

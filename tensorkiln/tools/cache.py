"""`tensorkiln cache`: where the compile cache is and what it holds (`info`), and emptying it (`clear`).

The cache root is $TENSORKILN_CACHE (default ~/.cache/tensorkiln); its size
limit is $TENSORKILN_CACHE_MAX_BYTES (runtime/cache_usage.py).
"""
from __future__ import annotations

import argparse

from ..runtime.cache_root import usable_root
from ..runtime.cache_usage import MAX_BYTES_VARIABLE, CacheInfo, cache_info, clear_cache


def human_bytes(count: int) -> str:
    """`count` bytes for a person: 512 B, 1.5 KiB, 3.0 GiB."""
    if count < 1024:
        return f"{count} B"
    size = count / 1024
    for unit in ("KiB", "MiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def info_text(info: CacheInfo) -> str:
    """The lines `tensorkiln cache info` prints."""
    limit = human_bytes(info.max_bytes) if info.max_bytes else "none"
    return "\n".join([
        f"location:       {info.location}",
        f"libraries:      {info.libraries}",
        f"graph records:  {info.graphs}",
        f"failed builds:  {info.failed}",
        f"total size:     {human_bytes(info.total_bytes)} (limit {limit}, {MAX_BYTES_VARIABLE})",
    ])


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tensorkiln cache`."""
    parser = argparse.ArgumentParser(prog="tensorkiln cache", description="the compile cache "
                                     "($TENSORKILN_CACHE, default ~/.cache/tensorkiln)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("info", help="location, number of libraries and graph records, total size")
    actions.add_parser("clear", help="remove every compiled library and graph record")
    args = parser.parse_args(argv)
    root = usable_root()
    if args.action == "info":
        print(info_text(cache_info(root)))
    else:
        removed = clear_cache(root)
        print(f"removed {removed.libraries} libraries, {removed.graphs} graph records and {removed.failed} "
              f"failed builds ({human_bytes(removed.total_bytes)}) from {root}")
    return 0

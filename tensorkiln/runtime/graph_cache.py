"""The compiled-graph cache: a graph compiled before skips lowering and code generation.

Lowering and C generation take about a second for a ResNet-18 (the C
compiler's own cache only saves the compiler run), so a second layer of
cache maps the optimized graph itself to the finished library. Its key is a
sha256 of everything the generated code depends on, handed in as plain text
by the layers above (this module knows no graph and no target):

- the graph's fingerprint (tensorkiln.ir.fingerprint): every node's op,
  inputs (by position), attributes, type and composite scope, with constants
  by content digest, not the user's source locations;
- the compile options (optimization level, fast math, debug, in-place pairs);
- the target (pipeline/stages.py): vector width, caches and thread count read
  by the templates, and any convolution algorithm forced by `forced_conv_algorithm`;
- tensorkiln's own source (a digest of every .py file of the package), so a
  changed compiler never reuses an old entry;
- the C compiler, its flags and the CPU features (through the library's key).

An entry is `<cache>/graphs/<key>.json`: the library's cache key, the
encoded signature, the memory-plan figures, the in-place pairs and each
kernel's name, kind, nodes and loop IR (for reports). It is written to a
temporary name and renamed, so readers never see half an entry. When the
library it names is gone or corrupt, the entry counts as a miss.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .c_compiler import build_flags, cache_dir, compiler_version, cpu_features, find_c_compiler

ENTRY_FORMAT = "1"  # bump when the entry's fields change


@dataclass
class CachedBuild:
    """What a cache entry restores: enough to load the library and fill the report."""

    library_key: str
    signature: str  # Signature.encode()
    kernels: list[dict]  # name, kind, nodes, loop_ir
    arena_bytes: int
    naive_bytes: int
    lower_bound_bytes: int
    in_place: dict[int, int]  # output position -> input position


@functools.lru_cache(maxsize=None)
def package_digest() -> str:
    """sha256 over tensorkiln's Python sources: any change to the compiler invalidates every entry."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def entry_key(fingerprint: str, *, options: str, target: str, debug: bool) -> str:
    """The cache key of compiling the graph of `fingerprint` with these options for this target.

    All plain text, made by the layers that know what it describes: `fingerprint` by
    tensorkiln.ir.fingerprint, `options` (the compile options and in-place pairs) and
    `target` (what the kernel templates read of the machine) by the pipeline. `debug`
    selects the C compiler's flags, which are part of the key too.
    """
    cc = find_c_compiler() or ""
    parts = (ENTRY_FORMAT, package_digest(), fingerprint, options, target,
             compiler_version(cc) if cc else "", " ".join(build_flags(debug)), cpu_features())
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _entry_path(key: str) -> Path:
    return cache_dir() / "graphs" / f"{key}.json"


def load_entry(key: str) -> CachedBuild | None:
    """The entry stored under `key`, or None."""
    try:
        data = json.loads(_entry_path(key).read_text())
        data["in_place"] = {int(k): v for k, v in data["in_place"].items()}
        return CachedBuild(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def store_entry(key: str, build: CachedBuild) -> None:
    """Publish an entry atomically (write a temporary file, then rename it); failures only cost a miss."""
    path = _entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".entry-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(build.__dict__, f)
        os.replace(temporary, path)
    except OSError:
        pass


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
- the target (driver/stages.py): vector width, caches and thread count read
  by the templates, and any convolution algorithm forced by `forced_conv_algorithm`;
- tensorkiln's own source (a digest of every .py file of the package), so a
  changed compiler never reuses an old entry;
- the C compiler, its flags and the CPU features (through the library's key).

An entry is `<cache>/graphs/<key>.json`: the library's cache key, the
encoded signature, the memory-plan figures, the in-place pairs and each
kernel's name, kind, nodes and loop IR (for reports). It is written to a
temporary name and renamed, so readers never see half an entry. When the
library it names is gone or corrupt, the entry counts as a miss. So does an
entry that cannot be read as one (not JSON, a field missing or of the wrong
type, a library key that is not a sha256 digest): it is moved aside to
`failed/graph-<key>.json`, to be rebuilt. A hit refreshes the entry's time,
which the cache's size limit reads (cache_usage.py).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from .c_compiler import build_flags, cache_dir, compiler_version, cpu_features, find_c_compiler
from .cache_root import inside, is_digest, make_private_dir
from .cache_usage import FAILED, GRAPHS, touch
from .signature import Signature

ENTRY_FORMAT = "1"  # bump when the entry's fields change
# driver.executable.KernelInfo
KERNEL_FIELDS = {"name": str, "kind": str, "nodes": list, "loop_ir": str, "precision": str, "tuning": list}


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
    """graphs/<key>.json in the cache; ValueError unless `key` is a sha256 digest."""
    return inside(cache_dir() / GRAPHS, key, ".json")


class MalformedEntry(ValueError):
    """A stored entry that parses as JSON but is not an entry (the message says what is wrong)."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise MalformedEntry(what)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_kernel(kernel: object) -> None:
    _require(isinstance(kernel, dict) and set(kernel) == set(KERNEL_FIELDS), "a kernel's fields")
    for name, kind in KERNEL_FIELDS.items():
        _require(isinstance(kernel[name], kind), f"kernel field {name}")
    _require(all(isinstance(node, str) for node in kernel["nodes"]), "a kernel's nodes")
    _require(all(isinstance(use, str) for use in kernel["tuning"]), "a kernel's tuned configurations")


def parse_entry(data: object) -> CachedBuild:
    """The CachedBuild that decoded JSON `data` describes; MalformedEntry unless every field fits."""
    expected = {f.name for f in fields(CachedBuild)}
    _require(isinstance(data, dict) and set(data) == expected, f"fields {sorted(expected)}")
    _require(is_digest(data["library_key"]), "library_key is not a sha256 digest")
    _require(isinstance(data["signature"], str), "signature")
    try:
        Signature.decode(data["signature"])
    except (ValueError, TypeError) as exc:
        raise MalformedEntry(f"signature: {exc}") from exc
    _require(isinstance(data["kernels"], list), "kernels")
    for kernel in data["kernels"]:
        _check_kernel(kernel)
    for name in ("arena_bytes", "naive_bytes", "lower_bound_bytes"):
        _require(_is_int(data[name]) and data[name] >= 0, name)
    pairs = data["in_place"]
    _require(isinstance(pairs, dict) and all(isinstance(k, str) and k.isdigit() and _is_int(v)
                                             for k, v in pairs.items()), "in_place")
    return CachedBuild(**{**data, "in_place": {int(k): v for k, v in pairs.items()}})


def _move_aside(path: Path) -> None:
    """Keep an unreadable entry as failed/graph-<key>.json (for a look), out of the way of its rebuild."""
    try:
        target = make_private_dir(path.parent.parent / FAILED) / f"graph-{path.name}"
        os.replace(path, target)
    except OSError:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def load_entry(key: str) -> CachedBuild | None:
    """The entry stored under `key`, or None (a missing or unreadable entry; the latter is moved aside)."""
    try:
        path = _entry_path(key)
        raw = path.read_bytes()
    except (OSError, ValueError):
        return None
    try:
        build = parse_entry(json.loads(raw))
    except ValueError:  # not JSON, or MalformedEntry
        _move_aside(path)
        return None
    touch(path)
    return build


def store_entry(key: str, build: CachedBuild) -> None:
    """Publish an entry atomically (write a temporary file, then rename it); failures only cost a miss."""
    try:
        path = _entry_path(key)
        make_private_dir(path.parent)
        fd, temporary = tempfile.mkstemp(prefix=".entry-", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(build.__dict__, f)
        os.replace(temporary, path)
    except (OSError, ValueError):
        pass


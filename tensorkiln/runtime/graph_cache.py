"""The compiled-graph cache: a graph compiled before skips lowering and code generation.

Lowering and C generation take about a second for a ResNet-18 (the C
compiler's own cache only saves the compiler run), so a second layer of
cache maps the optimized graph itself to the finished library. Its key is a
sha256 of everything the generated code depends on:

- the graph's fingerprint: every node's op, inputs (by position), attributes,
  type and composite scope, with constants by content digest; the user's
  source locations are left out (they only appear in comments, so a graph
  traced from another line reuses the entry and its comments name the first);
- the compile options (optimization level, fast math, debug, in-place pairs);
- the target: vector width, caches and thread count read by the templates,
  and any convolution algorithm forced by `forced_conv_algorithm`;
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

import numpy as np

from ..ir.graph import Graph
from ..ir.ops.registry import ConstantValue

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


def _attr_text(value) -> str:
    """A text that differs whenever the attribute's value differs (reprs of floats are exact)."""
    if isinstance(value, ConstantValue):
        return f"const:{value.digest}"
    if isinstance(value, np.ndarray):
        return f"array:{ConstantValue(value).digest}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_attr_text(v) for v in value) + ")"
    return repr(value)


def graph_fingerprint(graph: Graph) -> str:
    """sha256 of the graph's structure, attributes, types and constants (not its source locations)."""
    position = {node.id: k for k, node in enumerate(graph.nodes)}
    scopes: dict[str, str] = {}  # composite ids come from a process-wide counter: renumber them

    def scope_text(tag: str) -> str:
        name, _, _ = tag.rpartition(":")
        return scopes.setdefault(tag, f"{name}:{len(scopes)}")

    h = hashlib.sha256(f"{graph.name}\n".encode())
    for node in graph.nodes:
        inputs = ",".join(str(position[n.id]) for n in node.inputs)
        attrs = ";".join(f"{k}={_attr_text(v)}" for k, v in node.attrs.items())
        scope = "/".join(scope_text(tag) for tag in node.scope)
        h.update(f"{node.op}({inputs}){{{attrs}}}:{node.type}[{scope}]\n".encode())
    h.update(("in:" + ",".join(str(position[n.id]) for n in graph.inputs)).encode())
    h.update(("out:" + ",".join(str(position[n.id]) for n in graph.outputs)).encode())
    return h.hexdigest()


def _target_text() -> str:
    from ..kernels.schedule_defaults import thread_count
    from ..kernels.templates.conv import forced_algorithm
    from ..kernels.target import cpu_target
    return f"{cpu_target()!r};threads={thread_count()};conv={forced_algorithm()}"


def entry_key(graph: Graph, *, opt_level: int, fast_math: bool, debug: bool,
              updates: list[tuple[int, int]]) -> str:
    """The cache key of compiling the optimized `graph` with these options on this machine."""
    from .c_compiler import build_flags, compiler_version, cpu_features, find_c_compiler
    cc = find_c_compiler() or ""
    parts = (ENTRY_FORMAT, package_digest(), graph_fingerprint(graph),
             f"opt={opt_level};fast_math={fast_math};debug={debug};updates={sorted(updates)}",
             _target_text(), compiler_version(cc) if cc else "", " ".join(build_flags(debug)), cpu_features())
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _entry_path(key: str) -> Path:
    from .c_compiler import cache_dir
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


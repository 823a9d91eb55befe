"""Export a compiled graph as a standalone C library: `f.export(out, *args)`, `m.export(out)`, `tensorkiln export`.

The library is the same generated C the Python call runs (stage 5 of the
pipeline, for the graph as compiled) plus a thin API layer (codegen/c_api.py)
and the weights, built with the compile cache's flags (runtime/export_build.py).
The directory holds:

    libNAME.so, libNAME.a   kernels, entry point, API and (when embedded) the weights
    NAME.weights            the weights image, when not embedded (chosen by size)
    NAME.h                  the C99 API
    example.c, Makefile     `make run` builds and runs the model once from C
    NAME.json               inputs, outputs, dtypes, shapes, target CPU features, tensorkiln version
    src/                    the C sources the libraries were built from

`tk.load_compiled(out)` (runtime/exported.py) loads it back.
"""
from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..codegen.c_api import LibraryApi, api_source, header, kernels_source, weights_assembly
from ..codegen.c_example import example_source, makefile
from ..errors import TensorKilnError
from ..runtime import export_build
from ..runtime.export_format import Manifest, TensorSpec, check_model_name, write_weights
from ..runtime.signature import ArgSpec, numpy_dtypes
from ..runtime.version import __version__
from . import build as build_module
from .executable import CompiledGraph, index_checks
from .progress import Progress

WEIGHTS_CHOICES = ("auto", "embed", "file")
# Above this the weights go beside the library: a library that size is slow to link and to copy,
# and a mapped file is as fast to create.
EMBED_LIMIT_BYTES = 256 * 2 ** 20


class ExportError(TensorKilnError):
    """The graph cannot be exported as asked (not compiled, updates state in place, a bad name...)."""


@dataclass(frozen=True)
class ExportedLibrary:
    """What an export wrote, and what it cost."""

    directory: Path
    manifest: Manifest
    shared_library: Path
    static_library: Path
    weights_bytes: int
    build_seconds: float  # the C compiler's share
    seconds: float        # the whole export

    @property
    def embedded(self) -> bool:
        return self.manifest.weights_storage == "embedded"


def export_graph(compiled: CompiledGraph, directory: str | os.PathLike, *, name: str,
                 input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
                 weights: str = "auto", openmp: bool = True) -> ExportedLibrary:
    """Write the exported library of `compiled` into `directory` (created; files of the same name replaced).

    input_names/output_names: what the API calls each input and output (default: the
    graph's names); weights: "embed", "file" (NAME.weights beside the library) or
    "auto" (embedded up to EMBED_LIMIT_BYTES); openmp=False builds without the
    OpenMP runtime (one thread).
    """
    name = check_model_name(name)
    with Progress(f"exporting {name}") as progress:
        return _export(compiled, Path(directory), name, input_names, output_names, weights, openmp, progress)


def _export(compiled: CompiledGraph, out: Path, name: str, input_names: Sequence[str] | None,
            output_names: Sequence[str] | None, weights: str, openmp: bool, progress: Progress) -> ExportedLibrary:
    start = time.perf_counter()
    if weights not in WEIGHTS_CHOICES:
        raise ExportError(f"weights must be one of {WEIGHTS_CHOICES}, got {weights!r}")
    if compiled.module is None:
        raise ExportError(f"graph {compiled.graph.name!r} was not compiled to C "
                          f"({compiled.report.fallback_reason}): there is no library to export")
    lowering = compiled.lowering
    if lowering.in_place:
        raise ExportError(f"graph {compiled.graph.name!r} writes outputs in place of its inputs (state updates or "
                          f"donated arguments): export a function without them")
    program, constants = lowering.lowered.program, lowering.lowered.constants
    if program.sizes:  # the C API's shape queries and arena are static for now
        raise ExportError(f"graph {compiled.graph.name!r} has symbolic sizes ({', '.join(program.sizes)}): an "
                          f"exported library has static shapes for now; export with tk.jit(fn, dynamic=False)")
    progress.stage(f"generating C for {len(program.kernels)} kernels")
    source = build_module.generate(program)
    signature = source.signature
    if signature.encode() != compiled.module.signature.encode():
        raise ExportError(f"graph {compiled.graph.name!r}: the regenerated code does not match the loaded library "
                          f"({signature.encode()[:80]} vs {compiled.module.signature.encode()[:80]})")
    inputs = _specs(signature.inputs, input_names, "input")
    outputs = _specs(signature.outputs, output_names, "output")
    arrays = [_constant_bytes(array, spec) for array, spec in zip(constants, signature.constants)]

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".export-{name}-", dir=out))
    try:
        progress.stage(f"writing {sum(a.nbytes for a in arrays) / 2 ** 20:.1f} MiB of weights")
        layout, digest = write_weights(work / f"{name}.weights", arrays)
        embedded = weights == "embed" or (weights == "auto" and layout.total_bytes <= EMBED_LIMIT_BYTES)
        cc = export_build.compiler()
        api = LibraryApi(name, inputs, outputs, layout.offsets, layout.total_bytes, digest, embedded,
                         signature.arena_bytes, tuple(index_checks(compiled.graph)),
                         export_build.target_cpu_checks(cc))
        (work / f"{name}_kernels.c").write_text(kernels_source(api, source.text))
        (work / f"{name}_api.c").write_text(api_source(api))
        (work / f"{name}.h").write_text(header(api))
        if embedded:
            (work / f"{name}_weights.S").write_text(weights_assembly(api))
        built = export_build.build_library(work, name, openmp=openmp, embedded=embedded, report=progress.stage)
        manifest = Manifest(name, inputs, outputs, tuple(flag for _, flag in api.cpu_checks), platform.machine(),
                            openmp, "embedded" if embedded else "file", layout.total_bytes, digest.hex(),
                            __version__, built.compiler, built.flags)
        (work / "example.c").write_text(example_source(api))
        (work / "Makefile").write_text(makefile(api, openmp))
        manifest.write(work / f"{name}.json")
        _publish(work, out, name, embedded)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ExportedLibrary(out, manifest, out / manifest.library, out / manifest.static_library,
                           layout.total_bytes, built.seconds, time.perf_counter() - start)


def _specs(args: tuple[ArgSpec, ...], names: Sequence[str] | None, role: str) -> tuple[TensorSpec, ...]:
    if names is None:
        names = [a.name for a in args]
    names = list(names)
    if len(names) != len(args):
        raise ExportError(f"{len(names)} {role} names given for {len(args)} {role}s")
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ExportError(f"{role} names must be distinct non-empty strings, got {names}")
    return tuple(TensorSpec(n, a.dtype, a.shape) for n, a in zip(names, args))


def _constant_bytes(array: np.ndarray, spec: ArgSpec) -> np.ndarray:
    """A constant as the entry reads it: C order, in its storage dtype (the module checks the same)."""
    array = np.asarray(array, order="C")
    if array.dtype not in numpy_dtypes(spec.dtype) or array.shape != spec.shape:
        raise ExportError(f"constant {spec.name}: {array.dtype}{list(array.shape)} does not match {spec.describe()}")
    return array


def _publish(work: Path, out: Path, name: str, embedded: bool) -> None:
    """Move the finished files from the build directory into `out` (the sources into out/src)."""
    files = [f"lib{name}.so", f"lib{name}.a", f"{name}.h", "example.c", "Makefile", f"{name}.json"]
    stale = out / f"{name}.weights"
    if embedded:
        stale.unlink(missing_ok=True)  # an earlier export's side file would only mislead
    else:
        files.append(f"{name}.weights")
    sources = out / "src"
    sources.mkdir(exist_ok=True)
    for source in (f"{name}_kernels.c", f"{name}_api.c") + ((f"{name}_weights.S",) if embedded else ()):
        os.replace(work / source, sources / source)
    for file in files:
        os.replace(work / file, out / file)


__all__ = ["EMBED_LIMIT_BYTES", "ExportError", "ExportedLibrary", "WEIGHTS_CHOICES", "export_graph"]

"""tk.load_compiled(directory): an exported library (driver/export.py) back in Python, as a callable.

No tracing and no C compiler: the manifest (NAME.json) is read and checked
field by field, the CPU is checked for the instruction sets the library was
built for (a directory exported on another CPU is refused with the missing
features named), and libNAME.so is loaded with ctypes and called through its
C API (`NAME_create`, `NAME_run`), the same calls a C program makes. The
library's own answers (names, ranks, shapes) must agree with the manifest.
Nothing here depends on the tensorkiln version that exported the directory:
only the manifest's format and the C API, so an export outlives upgrades.
"""
from __future__ import annotations

import ctypes
import os
import stat
import threading
from pathlib import Path
import numpy as np

from tensorkiln.errors import DTypeError, ShapeError, TensorKilnError

from .c_compiler import cpu_features
from .export_format import ExportFormatError, Manifest, TensorSpec, read_manifest
from .module import KernelError, LibraryLoadError
from .signature import Signature, numpy_dtypes


class IncompatibleCPUError(TensorKilnError, RuntimeError):
    """The exported library needs instruction sets this CPU does not have."""


def _find_manifest(directory: Path) -> Path:
    found = sorted(p for p in directory.glob("*.json") if p.is_file())
    if len(found) != 1:
        raise ExportFormatError(f"{directory}: expected one NAME.json manifest of an exported model, found "
                                f"{len(found)}{': ' + ', '.join(p.name for p in found) if found else ''}")
    return found[0]


def _regular_file(path: Path, what: str) -> Path:
    """`path` when it is a regular file (a symlink may not lead out of the directory), else a clear error."""
    try:
        mode = path.lstat().st_mode
    except OSError as err:
        raise ExportFormatError(f"the exported model's {what} {path} is missing ({err.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ExportFormatError(f"the exported model's {what} {path} is not a regular file")
    return path


def check_cpu(manifest: Manifest) -> None:
    """IncompatibleCPUError unless this CPU has every feature the manifest's library was built for."""
    have = set(cpu_features().split())
    missing = [f for f in manifest.cpu_features if f not in have]
    if missing:
        raise IncompatibleCPUError(
            f"model {manifest.name} was exported for a CPU with {', '.join(manifest.cpu_features)}; this CPU lacks "
            f"{', '.join(missing)}. Export it again on this machine")


class LoadedModel:
    """An exported model loaded back: `model(*inputs)` -> list of numpy arrays, one native call per call.

    `inputs`, `outputs` (TensorSpec: name, dtype, shape) and `manifest` describe it.
    Calls on one model are serialized (they share its intermediates); different
    models run in parallel.
    """

    def __init__(self, directory: str | os.PathLike, num_threads: int = 0):
        directory = Path(directory)
        if not directory.is_dir():
            raise ExportFormatError(f"{directory} is not a directory of an exported model")
        self.manifest = manifest = read_manifest(_find_manifest(directory))
        check_cpu(manifest)
        library = _regular_file(directory / manifest.library, "library")
        if manifest.weights_file is not None:
            _regular_file(directory / manifest.weights_file, "weights file")
        self.name, self.inputs, self.outputs = manifest.name, manifest.inputs, manifest.outputs
        self._numpy = [numpy_dtypes(s.dtype) for s in self.inputs + self.outputs]
        if any(d < 0 for s in self.inputs + self.outputs for d in s.shape):
            raise ExportFormatError(f"model {self.name} has symbolic dimensions, which load_compiled cannot run yet")
        try:
            self._lib = ctypes.CDLL(str(library.resolve()))
        except OSError as err:
            raise LibraryLoadError(f"cannot load {library}: {err}") from None
        self._bind_api()
        self._check_against_library()
        if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 0:
            raise ValueError(f"num_threads must be 0 (the OpenMP default) or a positive int, got {num_threads!r}")
        handle = self._create(num_threads)
        if not handle:
            raise TensorKilnError(f"{self.name}_create failed: {self._error()}")
        self._handle = ctypes.c_void_p(handle)
        self._lock = threading.Lock()

    def _function(self, suffix: str, restype, argtypes: list):
        try:
            function = getattr(self._lib, f"{self.name}_{suffix}")
        except AttributeError:
            raise LibraryLoadError(f"{self.manifest.library} has no {self.name}_{suffix}: not the library of "
                                   f"model {self.name}") from None
        function.restype, function.argtypes = restype, argtypes
        return function

    def _bind_api(self) -> None:
        pointers = ctypes.POINTER(ctypes.c_void_p)
        self._create = self._function("create", ctypes.c_void_p, [ctypes.c_int])
        self._destroy = self._function("destroy", None, [ctypes.c_void_p])
        self._run = self._function("run", ctypes.c_int, [ctypes.c_void_p, pointers, pointers])
        self._last_error = self._function("last_error", ctypes.c_char_p, [])
        self._queries = {}
        for kind in ("input", "output"):
            self._queries[kind] = (self._function(f"{kind}_name", ctypes.c_char_p, [ctypes.c_int]),
                                   self._function(f"{kind}_rank", ctypes.c_int, [ctypes.c_int]),
                                   self._function(f"{kind}_shape", ctypes.POINTER(ctypes.c_int64), [ctypes.c_int]))
        self._counts = {kind: self._function(f"num_{kind}s", ctypes.c_int, [])() for kind in ("input", "output")}

    def _check_against_library(self) -> None:
        """The manifest must describe the library it sits beside: same names, ranks, shapes and dtypes
        (a wrong dtype or shape would size the output arrays wrong for what the kernels write)."""
        signature = self._function("tk_signature", ctypes.c_char_p, [])()
        try:
            decoded = Signature.decode((signature or b"").decode("ascii"))
        except (UnicodeDecodeError, ValueError) as err:
            raise LibraryLoadError(f"{self.manifest.library}: unreadable signature ({err})") from None
        for kind, specs, args in (("input", self.inputs, decoded.inputs), ("output", self.outputs, decoded.outputs)):
            if [(s.dtype, s.shape) for s in specs] != [(a.dtype, a.shape) for a in args]:
                raise ExportFormatError(
                    f"model {self.name}: the manifest's {kind}s ({', '.join(f'{s.dtype}{list(s.shape)}' for s in specs)})"
                    f" are not the library's ({', '.join(f'{a.dtype}{list(a.shape)}' for a in args)})")
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            if self._counts[kind] != len(specs):
                raise ExportFormatError(f"model {self.name}: the manifest lists {len(specs)} {kind}s, the library "
                                        f"has {self._counts[kind]}")
            name_of, rank_of, shape_of = self._queries[kind]
            for i, spec in enumerate(specs):
                rank = rank_of(i)
                shape = tuple(shape_of(i)[d] for d in range(rank)) if rank >= 0 else None
                if (name_of(i) or b"").decode("utf-8", "replace") != spec.name or shape != spec.shape:
                    raise ExportFormatError(f"model {self.name}: {kind} {i} of the library is not the manifest's "
                                            f"{spec.name}{list(spec.shape)}")

    def _error(self) -> str:
        return (self._last_error() or b"").decode("utf-8", "replace")

    def _argument(self, value: object, spec: TensorSpec, dtypes: tuple[np.dtype, ...]) -> np.ndarray:
        array = value if isinstance(value, np.ndarray) else np.asarray(getattr(value, "numpy", lambda: value)())
        if array.dtype not in dtypes:
            raise DTypeError(f"model {self.name}: input {spec.name} expects {spec.dtype}, got {array.dtype}")
        if array.shape != spec.shape:
            raise ShapeError(f"model {self.name}: input {spec.name} expects shape {list(spec.shape)}, "
                             f"got {list(array.shape)}")
        return np.ascontiguousarray(array)

    def __call__(self, *inputs: object) -> list[np.ndarray]:
        """Run the model on `inputs` (arrays of the declared dtypes and shapes); its outputs, new arrays."""
        if len(inputs) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise TypeError(f"model {self.name} takes {len(self.inputs)} inputs ({names}), got {len(inputs)}")
        arrays = [self._argument(v, s, d) for v, s, d in zip(inputs, self.inputs, self._numpy)]
        outputs = [np.empty(s.shape, d[0]) for s, d in zip(self.outputs, self._numpy[len(self.inputs):])]
        in_pointers = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_pointers = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        with self._lock:
            if self._handle is None:
                raise TensorKilnError(f"model {self.name} was closed")
            status = self._run(self._handle, in_pointers, out_pointers)
            message = self._error() if status else ""
        if status:
            raise KernelError(message or f"{self.name}_run failed with status {status}")
        return outputs

    def close(self) -> None:
        """Free the model's memory now (it is freed on garbage collection otherwise)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self._destroy(handle)

    def __del__(self) -> None:
        if getattr(self, "_handle", None) is not None and getattr(self, "_destroy", None) is not None:
            self._destroy(self._handle)
            self._handle = None

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.inputs)
        outs = ", ".join(f"{s.name}: {s.dtype}{list(s.shape)}" for s in self.outputs)
        return f"<LoadedModel {self.name} ({ins}) -> ({outs})>"


def load_compiled(directory: str | os.PathLike, num_threads: int = 0) -> LoadedModel:
    """Load a directory written by export (f.export, m.export, `tensorkiln export`) as a callable."""
    return LoadedModel(directory, num_threads)


__all__ = ["IncompatibleCPUError", "LoadedModel", "check_cpu", "load_compiled"]

"""The on-disk format of an exported model: the manifest (NAME.json) and the weights image.

One place knows both, for the writer (driver/export.py) and the loader
(runtime/exported.py). Everything read back from disk is untrusted: the
manifest is checked field by field (`read_manifest`) before any of it is used,
and the weights image carries a header that the library itself checks
(size, format, and the digest it was built with) before binding a constant.

Weights image: a 64-byte header, then every constant at a 64-byte aligned
offset, in the entry's constant order::

    0   8 bytes   magic b"TKWEIGHT"
    8   u32       format version (1)
    12  u32       number of constants
    16  u64       total bytes of the image, header included
    24  32 bytes  sha256 of everything after the header
    56  8 bytes   zero

The same image is embedded in the library (`.incbin`) or written beside it as
NAME.weights; the library's C code reads it the same way in both cases.
"""
from __future__ import annotations

import hashlib
import json
import keyword
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tensorkiln.errors import TensorKilnError
from tensorkiln.runtime.signature import numpy_dtypes

FORMAT = "tensorkiln-export"
FORMAT_VERSION = 1
WEIGHTS_MAGIC = b"TKWEIGHT"
WEIGHTS_VERSION = 1
WEIGHTS_HEADER_BYTES = 64
WEIGHTS_ALIGNMENT = 64
MANIFEST_MAX_BYTES = 16 * 2 ** 20  # a manifest lists names and shapes: anything larger is not one
MAX_RANK = 32
STORAGES = ("embedded", "file")

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_FEATURE = re.compile(r"[a-z0-9_.]{1,32}")
_C_RESERVED = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int long
register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
main errno
""".split())


class ExportFormatError(TensorKilnError, ValueError):
    """An exported directory's manifest or weights are malformed, or not of this format."""


def check_model_name(name: object) -> str:
    """`name` when it can name the library and its C functions (a C identifier), else a clear error."""
    if not isinstance(name, str) or not _C_IDENTIFIER.fullmatch(name) or name in _C_RESERVED \
            or keyword.iskeyword(name) or name.startswith("tk_"):
        raise ExportFormatError(
            f"model name {name!r} must be a C identifier of at most 64 characters (letters, digits, _; not "
            f"starting with a digit), not a C keyword and not starting with tk_")
    return name


def model_name_from(text: str) -> str:
    """A valid model name made from `text` (a function's or a file's name): other characters become _."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)[:64] or "model"
    if name[0].isdigit() or name.startswith("tk_"):
        name = ("m_" + name)[:64]
    return name if name not in _C_RESERVED and not keyword.iskeyword(name) else f"{name}_model"


# ---- weights image -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WeightsLayout:
    """Where each constant lies in the image: byte offsets from the image's start, and sizes."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    total_bytes: int


def weights_layout(arrays: Sequence[np.ndarray]) -> WeightsLayout:
    """The offsets of `arrays` in an image: after the header, each at the next aligned offset."""
    offsets, sizes, position = [], [], WEIGHTS_HEADER_BYTES
    for array in arrays:
        position += -position % WEIGHTS_ALIGNMENT
        offsets.append(position)
        sizes.append(array.nbytes)
        position += array.nbytes
    return WeightsLayout(tuple(offsets), tuple(sizes), position)


def write_weights(path: Path, arrays: Sequence[np.ndarray]) -> tuple[WeightsLayout, bytes]:
    """Write the image of `arrays` (C-order bytes) to `path`; (its layout, the sha256 of its data)."""
    layout = weights_layout(arrays)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        f.write(bytes(WEIGHTS_HEADER_BYTES))  # the header, once the digest is known
        for array, offset in zip(arrays, layout.offsets):
            padding = bytes(offset - f.tell())
            data = np.ascontiguousarray(array).tobytes()
            digest.update(padding)
            digest.update(data)
            f.write(padding)
            f.write(data)
        f.seek(0)
        f.write(weights_header(len(arrays), layout.total_bytes, digest.digest()))
    return layout, digest.digest()


def weights_header(count: int, total_bytes: int, digest: bytes) -> bytes:
    """The 64-byte header of an image (see the module docstring)."""
    header = WEIGHTS_MAGIC + struct.pack("<IIQ", WEIGHTS_VERSION, count, total_bytes) + digest
    return header + bytes(WEIGHTS_HEADER_BYTES - len(header))


# ---- manifest ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """One input or output of an exported model: its name, dtype and shape (-1: a symbolic dimension)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Manifest:
    """What NAME.json says about an exported model."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    cpu_features: tuple[str, ...]  # /proc/cpuinfo flag names the code needs
    arch: str
    openmp: bool
    weights_storage: str  # "embedded" or "file"
    weights_bytes: int
    weights_sha256: str
    tensorkiln_version: str
    compiler: str = ""
    flags: tuple[str, ...] = ()

    @property
    def library(self) -> str:
        return f"lib{self.name}.so"

    @property
    def static_library(self) -> str:
        return f"lib{self.name}.a"

    @property
    def weights_file(self) -> str | None:
        return f"{self.name}.weights" if self.weights_storage == "file" else None

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "name": self.name,
            "tensorkiln_version": self.tensorkiln_version,
            "library": self.library, "static_library": self.static_library, "header": f"{self.name}.h",
            "inputs": [s.as_json() for s in self.inputs], "outputs": [s.as_json() for s in self.outputs],
            "target": {"arch": self.arch, "cpu_features": list(self.cpu_features), "openmp": self.openmp,
                       "compiler": self.compiler, "flags": list(self.flags)},
            "weights": {"storage": self.weights_storage, "file": self.weights_file, "bytes": self.weights_bytes,
                        "sha256": self.weights_sha256},
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_json(), indent=1) + "\n")


def read_manifest(path: Path) -> Manifest:
    """The manifest at `path`, every field checked; ExportFormatError naming the first bad one."""
    try:
        size = path.stat().st_size
        if size > MANIFEST_MAX_BYTES:
            raise ExportFormatError(f"{path}: {size:,} bytes is too large for a manifest")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        if isinstance(err, ExportFormatError):
            raise
        raise ExportFormatError(f"cannot read the manifest {path}: {err}") from None
    where = str(path)
    _expect(isinstance(data, dict), where, "the manifest must be a JSON object")
    _expect(data.get("format") == FORMAT, where, f"'format' must be {FORMAT!r} (not an exported tensorkiln model)")
    _expect(data.get("format_version") == FORMAT_VERSION, where,
            f"'format_version' {data.get('format_version')!r} is not supported (this tensorkiln reads "
            f"{FORMAT_VERSION})")
    try:
        name = check_model_name(data.get("name"))
    except ExportFormatError as err:
        raise ExportFormatError(f"{where}: {err}") from None
    for key, expected in (("library", f"lib{name}.so"), ("static_library", f"lib{name}.a"),
                          ("header", f"{name}.h")):
        _expect(data.get(key) == expected, where, f"'{key}' must be {expected!r}")
    target = data.get("target")
    _expect(isinstance(target, dict), where, "'target' must be an object")
    features = target.get("cpu_features")
    _expect(isinstance(features, list) and all(isinstance(f, str) and _FEATURE.fullmatch(f) for f in features),
            where, "'target.cpu_features' must be a list of CPU feature names")
    _expect(isinstance(target.get("arch"), str) and len(target["arch"]) <= 32, where, "'target.arch' must be text")
    _expect(isinstance(target.get("openmp"), bool), where, "'target.openmp' must be true or false")
    weights = data.get("weights")
    _expect(isinstance(weights, dict), where, "'weights' must be an object")
    storage = weights.get("storage")
    _expect(storage in STORAGES, where, f"'weights.storage' must be one of {STORAGES}")
    _expect(weights.get("file") == (f"{name}.weights" if storage == "file" else None), where,
            "'weights.file' must name NAME.weights when the weights are in a file, else be null")
    _expect(_is_count(weights.get("bytes")) and weights["bytes"] >= WEIGHTS_HEADER_BYTES, where,
            "'weights.bytes' must be a byte count")
    sha = weights.get("sha256")
    _expect(isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) is not None, where,
            "'weights.sha256' must be a sha256 digest")
    version = data.get("tensorkiln_version")
    _expect(isinstance(version, str) and len(version) <= 64, where, "'tensorkiln_version' must be text")
    return Manifest(
        name, _tensor_specs(data.get("inputs"), "inputs", where), _tensor_specs(data.get("outputs"), "outputs", where),
        tuple(features), target["arch"], target["openmp"], storage, weights["bytes"], sha, version,
        str(target.get("compiler", ""))[:200], tuple(str(f) for f in target.get("flags", ()) if isinstance(f, str)))


def _tensor_specs(items: object, key: str, where: str) -> tuple[TensorSpec, ...]:
    _expect(isinstance(items, list) and len(items) <= 100_000, where, f"'{key}' must be a list")
    specs = []
    for i, item in enumerate(items):
        what = f"'{key}[{i}]'"
        _expect(isinstance(item, dict), where, f"{what} must be an object")
        name, dtype, shape = item.get("name"), item.get("dtype"), item.get("shape")
        _expect(isinstance(name, str) and 0 < len(name) <= 256, where, f"{what}.name must be non-empty text")
        _expect(isinstance(dtype, str) and _known_dtype(dtype), where, f"{what}.dtype {dtype!r} is not a dtype")
        _expect(isinstance(shape, list) and len(shape) <= MAX_RANK
                and all(isinstance(d, int) and not isinstance(d, bool) and -1 <= d < 2 ** 62 for d in shape),
                where, f"{what}.shape must be a list of at most {MAX_RANK} sizes (-1 for a symbolic one)")
        specs.append(TensorSpec(name, dtype, tuple(shape)))
    return tuple(specs)


def _known_dtype(dtype: str) -> bool:
    try:
        numpy_dtypes(dtype)
    except ValueError:
        return False
    return True


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 62


def _expect(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise ExportFormatError(f"{where}: {message}")


__all__ = ["ExportFormatError", "Manifest", "TensorSpec", "WeightsLayout", "check_model_name", "model_name_from", "read_manifest",
           "weights_layout", "write_weights"]

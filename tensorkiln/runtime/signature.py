"""The calling signature of a compiled library: which arrays go in, in what order, of what type.

Codegen writes the signature into the library (`tk_signature()`), and the
runtime checks it on load, so a library is never called with the argument
layout of another program.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROLES = ("input", "output", "constant")

_NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}


def numpy_dtypes(dtype: str) -> tuple[np.dtype, ...]:
    """The numpy dtypes accepted for an array of `dtype`, preferred first.

    numpy has no bfloat16: a bfloat16 array is passed as its raw bits in
    uint16, or as `ml_dtypes.bfloat16` when that package is installed.
    """
    if dtype == "bfloat16":
        accepted = [np.dtype(np.uint16)]
        try:  # optional: the dtype the wider ecosystem (JAX, ONNX) uses
            import ml_dtypes  # type: ignore

            accepted.append(np.dtype(ml_dtypes.bfloat16))  # uint16 stays first: tensorkiln's own storage
        except ImportError:
            pass
        return tuple(accepted)
    if dtype not in _NUMPY_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return (_NUMPY_DTYPES[dtype],)


@dataclass(frozen=True)
class ArgSpec:
    """One array argument: its name, element type, shape and role."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str

    def __post_init__(self) -> None:
        # a symbolic dimension is its text (`s_batch`): the caller evaluates it per call
        object.__setattr__(self, "shape", tuple(d if isinstance(d, str) else int(d) for d in self.shape))
        if self.role not in ROLES:
            raise ValueError(f"argument {self.name}: role must be one of {ROLES}")
        numpy_dtypes(self.dtype)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def describe(self) -> str:
        """`name: dtype[d0, d1]`."""
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Signature:
    """Argument order of the entry function: inputs, then outputs, then constants."""

    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    constants: tuple[ArgSpec, ...] = ()
    arena_bytes: int = 0
    # size symbols whose values the entry reads per call from one int64 array after the arguments
    sizes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))
        for field_name in ("inputs", "outputs", "constants"):
            object.__setattr__(self, field_name, tuple(getattr(self, field_name)))

    @property
    def args(self) -> tuple[ArgSpec, ...]:
        """All arguments in entry order."""
        return self.inputs + self.outputs + self.constants

    def encode(self) -> str:
        """A one-line text form, embedded in the library and compared on load."""
        parts = [f"{a.role}:{a.name}:{a.dtype}:{'x'.join(map(str, a.shape))}" for a in self.args]
        sizes = [f"sizes:{','.join(self.sizes)}"] if self.sizes else []
        return ";".join(["tk1", *parts, *sizes, f"arena:{self.arena_bytes}"])

    @classmethod
    def decode(cls, text: str) -> "Signature":
        """The Signature whose `encode()` is `text`."""
        version, *parts, arena = text.split(";")
        if version != "tk1" or not arena.startswith("arena:"):
            raise ValueError(f"not an encoded signature: {text[:60]!r}")
        args: dict[str, list[ArgSpec]] = {role: [] for role in ROLES}
        for part in parts:
            role, name, dtype, shape = part.split(":")
            args[role].append(ArgSpec(name, dtype, tuple(int(d) for d in shape.split("x") if d), role))
        return cls(args["input"], args["output"], args["constant"], int(arena[len("arena:"):]))

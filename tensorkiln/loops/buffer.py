"""Buffer: a named, typed, flat region of memory that loop IR reads and writes."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tensorkiln.loops.types import check_dtype, compute_dtype, itemsize

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SCOPES = ("global", "local")


def check_identifier(name: str, what: str) -> str:
    """Return `name` if it is a C identifier, else raise ValueError naming `what` it was for."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise ValueError(f"{what} name {name!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return name


@dataclass(frozen=True)
class Buffer:
    """A flat array of `dtype` elements; `shape` is kept for printing and signatures.

    scope "global": memory that outlives a kernel (an input, an output, a
    constant or an intermediate in the arena); scope "local": a temporary
    created by an `Alloc` inside one kernel. Loads and stores index a buffer
    with one flat (row-major) element index.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "global"

    def __post_init__(self) -> None:
        check_identifier(self.name, "buffer")
        check_dtype(self.dtype)
        # a symbolic size (tensorkiln.shapes SymInt) stays symbolic: the program reads it per call
        object.__setattr__(self, "shape", tuple(d if hasattr(d, "symbolic_expr") else int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"buffer {self.name}: negative dimension in shape {self.shape}")
        if self.scope not in SCOPES:
            raise ValueError(f"buffer {self.name}: scope must be one of {SCOPES}, got {self.scope!r}")

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of storage."""
        return self.size * itemsize(self.dtype)

    @property
    def value_dtype(self) -> str:
        """The dtype a load from this buffer produces (float16/bfloat16 load as float32)."""
        return compute_dtype(self.dtype)

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"

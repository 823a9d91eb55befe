"""The names an algorithm is written with: Var, RDom and its RVars, and Buffer (an input image).

Coordinates follow Halide: `b[x, y]` has x as the innermost (column) index, so
a numpy array of shape (H, W) is read as `b[x, y]`.
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from tensorkiln.errors import DTypeError, ShapeError, TensorKilnError, user_location
from tensorkiln.loops.buffer import check_identifier
from tensorkiln.pipeline import types as T
from tensorkiln.pipeline.expr import Call, Expr, Extent, as_expr, cast, walk


class PipelineError(TensorKilnError, ValueError):
    """A malformed algorithm: a Func defined twice, used before its definition, called with too few arguments..."""


_names = itertools.count()


def unique_name(prefix: str) -> str:
    """A fresh name: prefix and a number."""
    return f"{prefix}{next(_names)}"


class Var(Expr):
    """A pure coordinate of a Func (Halide's `Var`), int32."""

    type = "int32"

    def __init__(self, name: Optional[str] = None):
        self.name = check_identifier(name or unique_name("v"), "Var")


class RVar(Expr):
    """One dimension of a reduction domain: runs from `min` over `extent` values."""

    type = "int32"

    def __init__(self, rdom: "RDom", index: int, name: str, min: Expr, extent: Expr):
        self.rdom, self.index, self.name, self.min, self.extent = rdom, index, name, min, extent


class RDom:
    """A reduction domain: `RDom(0, W, 0, H)` (or `RDom([(0, W), (0, H)])`) iterates x fastest.

    Its dimensions are `r.x`, `r.y`, `r.z`, `r.w` (or `r[i]`); an update
    definition that uses them runs once per point, in order.
    """

    def __init__(self, *bounds, name: Optional[str] = None):
        if len(bounds) == 1 and isinstance(bounds[0], (list, tuple)):
            bounds = tuple(v for pair in bounds[0] for v in pair)
        if not bounds or len(bounds) % 2:
            raise PipelineError(f"RDom takes (min, extent) pairs, got {bounds!r}")
        self.name = check_identifier(name or unique_name("r"), "RDom")
        self.dims: list[RVar] = []
        for k in range(len(bounds) // 2):
            lo, extent = as_expr(bounds[2 * k]), as_expr(bounds[2 * k + 1])
            for what, e in (("min", lo), ("extent", extent)):
                if not T.is_int(e.type) or any(isinstance(n, (Var, RVar, Call)) for n in walk(e)):
                    raise PipelineError(f"RDom {self.name}: {what} of dimension {k} must be an integer known "
                                        f"when the pipeline is compiled (a constant or a buffer extent), got {e}")
            self.dims.append(RVar(self, k, f"{self.name}_{'xyzw'[k] if k < 4 else k}", lo, extent))

    def __getitem__(self, k: int) -> RVar:
        return self.dims[k]

    def __len__(self) -> int:
        return len(self.dims)

    x = property(lambda self: self.dims[0])
    y = property(lambda self: self.dims[1])
    z = property(lambda self: self.dims[2])
    w = property(lambda self: self.dims[3])


class _Dim:
    def __init__(self, buffer: "Buffer", k: int):
        self.buffer, self.k = buffer, k

    def min(self) -> int:
        return 0

    def extent(self) -> Extent:
        return Extent(self.buffer, self.k)


class Buffer:
    """An input image: wraps a numpy array; `b[x, y]` reads element [y, x] of a 2-D array.

    Its extents (`b.width()`, `b.dim(k).extent()`) are expressions that take the
    shape of whatever array is bound when the pipeline is compiled, so a
    compiled pipeline accepts new arrays of other sizes.
    """

    def __init__(self, array: np.ndarray, name: Optional[str] = None):
        self.name = check_identifier(name or unique_name("input"), "Buffer")
        self.array = self._checked(array)
        self.type = T.check_type(self.array.dtype)
        self.dimensions = self.array.ndim

    def _checked(self, array: object) -> np.ndarray:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"Buffer {getattr(self, 'name', '')} takes a numpy array, got {type(array).__name__}")
        if array.ndim == 0:
            raise ShapeError(f"Buffer {self.name}: a 0-d array has no coordinates to index")
        return np.ascontiguousarray(array)

    def bind(self, array: np.ndarray) -> None:
        """Use `array` (same dtype and rank) from now on."""
        array = self._checked(array)
        if array.dtype != self.array.dtype or array.ndim != self.array.ndim:
            raise ShapeError(f"Buffer {self.name} holds {self.array.ndim}-d {self.array.dtype}, "
                             f"got a {array.ndim}-d {array.dtype} array")
        self.array = array

    def shape_xy(self) -> tuple[int, ...]:
        """Extents with x (the last numpy axis) first."""
        return tuple(reversed(self.array.shape))

    def dim(self, k: int) -> _Dim:
        return _Dim(self, k)

    def width(self) -> Extent:
        return Extent(self, 0)

    def height(self) -> Extent:
        return Extent(self, 1)

    def channels(self) -> Extent:
        return Extent(self, 2)

    def __getitem__(self, args) -> Call:
        return call(self, args, self.dimensions)


def call(target, args, dimensions: int) -> Call:
    args = args if isinstance(args, tuple) else (args,)
    exprs = tuple(as_expr(a) for a in args)
    if len(exprs) != dimensions:
        raise PipelineError(f"{target.name} has {dimensions} dimension(s) but is called with {len(exprs)} "
                            f"argument(s) at {user_location()}")
    for a in exprs:
        if not T.is_int(a.type):
            raise DTypeError(f"{target.name} is called with a {a.type} coordinate ({a}) at {user_location()}; "
                             "coordinates are integers (use pl.cast)")
    return Call(target, tuple(cast("int32", a) for a in exprs))

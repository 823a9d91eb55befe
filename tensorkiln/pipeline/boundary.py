"""Boundary conditions: Funcs that read an input Buffer anywhere, defined outside it.

Each returns a Func of the Buffer's dimensions. Its extents are the bound
array's, read when the pipeline is compiled, so a compiled pipeline keeps the
right edges for inputs of other sizes.
"""
from __future__ import annotations

from tensorkiln.pipeline.expr import Expr, as_expr, cast, clamp, select
from tensorkiln.pipeline.func import Func
from tensorkiln.pipeline.names import Buffer, Var


def _vars(buffer: Buffer) -> list[Var]:
    return [Var(f"{buffer.name}_{'xyzw'[k] if k < 4 else k}") for k in range(buffer.dimensions)]


def repeat_edge(buffer: Buffer) -> Func:
    """Outside the image, the nearest edge pixel: b[clamp(x, 0, W-1), clamp(y, 0, H-1)]."""
    f, vs = Func(f"{buffer.name}_repeat_edge"), _vars(buffer)
    f[tuple(vs)] = buffer[tuple(clamp(v, 0, buffer.dim(k).extent() - 1) for k, v in enumerate(vs))]
    return f


def constant_exterior(buffer: Buffer, value) -> Func:
    """Outside the image, `value` (converted to the image's type)."""
    f, vs = Func(f"{buffer.name}_constant_exterior"), _vars(buffer)
    outside: Expr = as_expr(False)
    for k, v in enumerate(vs):
        outside = outside | (v < 0) | (v >= buffer.dim(k).extent())
    inside = buffer[tuple(clamp(v, 0, buffer.dim(k).extent() - 1) for k, v in enumerate(vs))]
    f[tuple(vs)] = select(outside, cast(buffer.type, as_expr(value, inside)), inside)
    return f


def mirror_image(buffer: Buffer) -> Func:
    """Outside the image, its reflection with the edge repeated: ... c b a | a b c | c b a ..."""
    f, vs = Func(f"{buffer.name}_mirror_image"), _vars(buffer)
    coords = []
    for k, v in enumerate(vs):
        n = buffer.dim(k).extent()
        m = v % (2 * n)  # Euclidean: in [0, 2n)
        reflected = select(m < n, m, 2 * n - 1 - m)
        coords.append(clamp(reflected, 0, n - 1))  # a no-op that lets bounds inference see [0, n-1]
    f[tuple(vs)] = buffer[tuple(coords)]
    return f

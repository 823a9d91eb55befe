"""tensorize: replace a loop nest that matches an intrinsic's description by a call of its
implementation (a register-tiled GEMM update, a small sum), and the registry of intrinsics."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tensorkiln.loops import expr as E
from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.ir import Alloc, Block, For, Kernel, Let, Stmt, Store, block, iter_stmts
from tensorkiln.loops.simplify import build_linear, linear_form
from tensorkiln.loops.nest import (
    ScheduleError, _fresh, _loop_vars_inside, _loops, _map_all_exprs, _map_expr_tree, _rename_loops, _replace,
    _rewrite, _uses,
)


@dataclass(frozen=True)
class Intrinsic:
    """A micro-kernel: a loop nest it computes (`description`) and the code that replaces it (`implementation`).

    Both are statements over the intrinsic's own buffer and variable names.
    Variables named in `wildcards` match any expression that does not use a
    loop variable of the matched nest (an offset, a leading dimension, a
    trip count); the loop variables of the description match the nest's
    loops in order; buffers match buffers of the same dtype.
    """

    name: str
    description: Stmt
    implementation: Stmt
    wildcards: tuple[str, ...] = ()


_INTRINSICS: dict[str, Intrinsic] = {}


def register_intrinsic(intrinsic: Intrinsic) -> Intrinsic:
    """Make `intrinsic` available to tensorize (and to saved schedules) by name."""
    _INTRINSICS[intrinsic.name] = intrinsic
    return intrinsic


class _Matcher:
    def __init__(self, intrinsic: Intrinsic, nest_vars: set[str]):
        self.wild = set(intrinsic.wildcards)
        self.nest_vars = nest_vars
        self.vars: dict[str, E.Var] = {}
        self.exprs: dict[str, E.Expr] = {}
        self.buffers: dict[str, Buffer] = {}

    def buffer(self, p: Buffer, a: Buffer) -> bool:
        if p.dtype != a.dtype:
            return False
        return self.buffers.setdefault(p.name, a) == a

    def index(self, p: E.Expr, a: E.Expr) -> bool:
        """Integer index expressions: match linear forms, wildcards absorbing the nest-invariant part."""
        pt, pc = linear_form(p)
        at, ac = linear_form(a)
        rest = dict(at)
        wild_terms = []
        for t, c in pt.items():
            if isinstance(t, E.Var) and t.name in self.wild:
                wild_terms.append((t, c))
                continue
            coef_var = None
            if isinstance(t, E.BinOp) and t.operator == "mul":  # v * wildcard coefficient
                x, y = t.a, t.b
                if isinstance(y, E.Var) and y.name in self.wild:
                    t, coef_var = x, y
                elif isinstance(x, E.Var) and x.name in self.wild:
                    t, coef_var = y, x
            if not (isinstance(t, E.Var) and t.name in self.vars):
                return False
            actual = self.vars[t.name]
            got = rest.pop(actual, 0)
            if coef_var is not None:
                if not self._bind(coef_var.name, E.const(got * c), a.dtype) or got == 0:
                    return False
            elif got != c:
                return False
        if any(_uses(t, self.nest_vars) for t in rest):
            return False
        if len(wild_terms) > 1 or (wild_terms and wild_terms[0][1] != 1):
            return False
        leftover = build_linear(rest, ac - pc, a.dtype)
        if wild_terms:
            return self._bind(wild_terms[0][0].name, leftover, a.dtype)
        return not rest and ac == pc

    def _bind(self, name: str, value: E.Expr, dtype: str) -> bool:
        known = self.exprs.setdefault(name, value)
        return known == value

    def expr(self, p: E.Expr, a: E.Expr) -> bool:
        if isinstance(p, E.Var) and p.name in self.wild:
            return not _uses(a, self.nest_vars) and self._bind(p.name, a, a.dtype)
        if isinstance(p, E.Var):
            return self.vars.get(p.name) == a
        if E.is_int(p.dtype) and E.is_int(a.dtype) and not isinstance(p, E.Load):
            return self.index(p, a)
        if isinstance(p, E.Load):
            return isinstance(a, E.Load) and self.buffer(p.buffer, a.buffer) and self.index(p.index, a.index)
        if type(p) is not type(a) or p.op != a.op or len(p.children) != len(a.children):
            return False
        if isinstance(p, E.Const):
            return p == a
        if isinstance(p, E.Cast) and p.dtype != a.dtype:
            return False
        if all(self.expr(x, y) for x, y in zip(p.children, a.children)):
            return True
        if isinstance(p, E.BinOp) and p.operator in E.COMMUTATIVE_OPS:
            return self.expr(p.a, a.b) and self.expr(p.b, a.a)
        return False

    def stmt(self, p: Stmt, a: Stmt) -> bool:
        if isinstance(p, Block) and len(p.stmts) == 1:
            p = p.stmts[0]
        if isinstance(a, Block) and len(a.stmts) == 1:
            a = a.stmts[0]
        if isinstance(p, For):
            if not isinstance(a, For):
                return False
            if not self.expr(p.extent, a.extent):
                return False
            self.vars[p.var.name] = a.var
            return self.stmt(p.body, a.body)
        if isinstance(p, Store):
            return isinstance(a, Store) and self.buffer(p.buffer, a.buffer) and self.index(p.index, a.index) \
                and self.expr(p.value, a.value)
        if isinstance(p, Block):
            return isinstance(a, Block) and len(p.stmts) == len(a.stmts) and all(
                self.stmt(x, y) for x, y in zip(p.stmts, a.stmts))
        return False


def tensorize(kernel: Kernel, loop: str, intrinsic: "str | Intrinsic") -> Kernel:
    """Replace the loop nest rooted at `loop` by the inlined body of a micro-kernel.

    Preconditions: the nest matches the intrinsic's description (same loop
    structure, the same computation up to renaming of loops and buffers, with
    wildcards bound to nest-invariant expressions).

    >>> from tensorkiln.loops.schedule import _example_accumulate
    >>> k = tensorize(_example_accumulate(), "j", "sum5")
    >>> print(k)
    kernel rowsum(out: float32[4], a: float32[4, 5]):
      for i in 0..4:
        out[i] = 0.0
        out[i] = out[i] + a[i*5] + a[i*5 + 1] + a[i*5 + 2] + a[i*5 + 3] + a[i*5 + 4]
    """
    if isinstance(intrinsic, str):
        if intrinsic not in _INTRINSICS:
            raise ScheduleError(f"tensorize: no intrinsic named {intrinsic!r} (known: {', '.join(sorted(_INTRINSICS))})")
        intrinsic = _INTRINSICS[intrinsic]
    target = _loops(kernel, loop)
    matcher = _Matcher(intrinsic, _loop_vars_inside(target) | {loop})
    if not matcher.stmt(intrinsic.description, target):
        raise ScheduleError(f"tensorize of loop {loop}: the nest does not match intrinsic {intrinsic.name}:\n"
                            f"{intrinsic.description}")
    taken = kernel.declared_names()
    impl_vars = {s.var.name for s in iter_stmts(intrinsic.implementation) if isinstance(s, (For, Let))}
    renames = {v: E.Var(_fresh(kernel, f"{loop}_{v}", taken), "int64") for v in impl_vars}
    impl = _map_all_exprs(intrinsic.implementation, lambda e: matcher.exprs.get(e.name) if isinstance(e, E.Var) and e.name in matcher.exprs
                          else renames.get(e.name) if isinstance(e, E.Var) else None)
    impl = _rename_loops(impl, renames)
    impl = _retarget_buffers(impl, matcher.buffers)
    return _replace(kernel, target, impl)


def _retarget_buffers(s: Stmt, mapping: dict[str, Buffer]) -> Stmt:
    def expr(e: E.Expr) -> Optional[E.Expr]:
        if isinstance(e, E.Load) and e.buffer.name in mapping:
            return E.Load(mapping[e.buffer.name], _map_expr_tree(e.index, expr))
        return None
    s = _map_all_exprs(s, expr)
    return _rewrite(s, lambda x: Store(mapping[x.buffer.name], x.index, x.value)
                    if isinstance(x, Store) and x.buffer.name in mapping else None)


def _sum5() -> Intrinsic:
    """Example intrinsic: a 5-term reduction into one location, fully unrolled."""
    o, a = Buffer("o", "float32", (1 << 40,)), Buffer("a", "float32", (1 << 40,))
    k = E.Var("k")
    oi, ai = E.Var("oi"), E.Var("ai")
    desc = For(k, 5, Store(o, oi, E.Load(o, oi) + E.Load(a, ai + k)))
    value: E.Expr = E.Load(o, oi)
    for t in range(5):
        value = value + E.Load(a, ai + t)
    return Intrinsic("sum5", desc, Store(o, oi, value), ("oi", "ai"))


def gemm_update_intrinsic(mr: int, nr: int, dtype: str = "float32") -> Intrinsic:
    """The register-blocked GEMM micro-kernel `C[mr x nr] += Ap[kc x mr]^T Bp[kc x nr]` over packed panels.

    Description: `for p in 0..kc: for i in 0..mr: for j in 0..nr: c[c0 + i*ldc + j] += ap[a0 + p*mr + i] *
    bp[b0 + p*nr + j]`. Implementation: the tile is kept in a local `mr x nr`
    accumulator (which the C compiler holds in vector registers), with the
    i loop unrolled and the j loop vectorized, and added to C once.
    """
    big = (1 << 40,)
    c, ap, bp = Buffer("c", dtype, big), Buffer("ap", dtype, big), Buffer("bp", dtype, big)
    p, i, j = E.Var("p"), E.Var("i"), E.Var("j")
    kc, c0, ldc, a0, b0 = (E.Var(n) for n in ("kc", "c0", "ldc", "a0", "b0"))
    desc = For(p, kc, For(i, mr, For(j, nr, Store(
        c, c0 + i * ldc + j, E.Load(c, c0 + i * ldc + j) + E.Load(ap, a0 + p * mr + i) * E.Load(bp, b0 + p * nr + j)))))
    acc = Buffer("acc", dtype, (mr * nr,), scope="local")
    q, i2, j2, i3, j3 = E.Var("q"), E.Var("i2"), E.Var("j2"), E.Var("i3"), E.Var("j3")
    zero = E.Const(0.0, dtype)
    impl = Alloc(acc, block(
        For(q, mr * nr, Store(acc, q, zero), "vectorized"),
        For(p, kc, For(i, mr, For(j, nr, Store(acc, i * nr + j, E.Load(acc, i * nr + j)
                                                + E.Load(ap, a0 + p * mr + i) * E.Load(bp, b0 + p * nr + j)),
                                  "vectorized"), "unrolled")),
        For(i2, mr, For(j2, nr, Store(c, c0 + i2 * ldc + j2, E.Load(c, c0 + i2 * ldc + j2)
                                      + E.Load(acc, i2 * nr + j2)), "vectorized"))))
    del i3, j3
    return Intrinsic(f"gemm_update_{mr}x{nr}_{dtype}", desc, impl, ("kc", "c0", "ldc", "a0", "b0"))


register_intrinsic(_sum5())
for _mr, _nr in ((8, 32), (6, 16), (8, 16), (4, 8)):
    register_intrinsic(gemm_update_intrinsic(_mr, _nr, "float32"))
    register_intrinsic(gemm_update_intrinsic(_mr, _nr // 2 if _nr > 8 else _nr, "float64"))

"""Proving two integer index expressions equal, over loop variables and run-time sizes.

The simplifier compares indices structurally, and with a size known only at
run time it cannot always bring two spellings of one index to one form. A KV
cache of shape (heads, kv, 64) written through a flattened row loop
`r < heads*kv` stores at `r*64 + c` and reads the old value at
`(r % kv)*64 + c + ((r // kv) % heads)*kv*64`: equal, because `r // kv < heads`.

`index_form` writes an index as a canonical polynomial (shapes/poly.py) over
loop variables, size symbols and floor quotients, with integer coefficients:

- `x % d` becomes `x - d*(x // d)` (floor semantics, d provably positive);
- `(x // a) // b` becomes `x // (a*b)`, and `(q*d + r) // d` becomes `q + r // d`;
- `x // d` becomes 0 when `0 <= x < d` is proven from the loops' extents.

Two indices with the same form are equal for every value of the variables
in their loops' ranges. A form is only a proof: `None` (not an index this
understands) and different forms both mean "not proven".

Bounds are polynomials over the size symbols: a loop variable `i < n*h` lies
in [0, n*h - 1], a symbol is itself (its value is fixed for a call, and at
least 1), and a polynomial is non-negative when writing each symbol `s` as
`1 + t` with `t >= 0` leaves no negative coefficient.
"""
from __future__ import annotations

from typing import Mapping, Optional

from tensorkiln.loops.expr import BinOp, Const, Expr, Unary, Var, is_size_var
from tensorkiln.loops.ir import For, Stmt, iter_stmts
from tensorkiln.shapes.poly import OpaqueAtom, Poly

Extents = Mapping[str, Expr]  # loop variable -> the extent of its loop (i in [0, extent))
SYMBOL_MIN = 1  # a size symbol's smallest value (symbols are >= 2; 1 keeps the proofs safe either way)
_SHIFTED = "+"  # suffix naming `t` in `s = SYMBOL_MIN + t` when checking a polynomial's sign


def provably_equal(a: Expr, b: Expr, extents: Extents) -> bool:
    """True when `a == b` for every value of the loop variables in their `extents` and of the size symbols."""
    if a == b:
        return True
    forms = _Forms(extents)
    fa, fb = forms.of(a), forms.of(b)
    return fa is not None and fa == fb


def index_form(expr: Expr, extents: Extents) -> Optional[Poly]:
    """The canonical polynomial of an integer index, or None when it holds an operation not understood."""
    return _Forms(extents).of(expr)


def loop_extents(stmt: Stmt) -> dict[str, Expr]:
    """Each loop variable of `stmt` with its loop's extent; a name two loops bind with different extents is left out."""
    found: dict[str, Expr] = {}
    clashing: set[str] = set()
    for s in iter_stmts(stmt):
        if isinstance(s, For):
            name = s.var.name
            if found.setdefault(name, s.extent) != s.extent:
                clashing.add(name)
    return {name: extent for name, extent in found.items() if name not in clashing}


class _Forms:
    """Canonical forms and bounds for one set of loop extents (memoized)."""

    def __init__(self, extents: Extents):
        self.extents = dict(extents)
        self._memo: dict[Expr, Optional[Poly]] = {}

    # ---- canonical form
    def of(self, expr: Expr) -> Optional[Poly]:
        if expr not in self._memo:
            self._memo[expr] = self._form(expr)
        return self._memo[expr]

    def _form(self, e: Expr) -> Optional[Poly]:
        if isinstance(e, Const):
            return Poly.constant(int(e.value)) if isinstance(e.value, int) and not isinstance(e.value, bool) else None
        if isinstance(e, Var):
            return Poly.atom(e.name) if e.dtype == "int64" else None
        if isinstance(e, Unary) and e.operator == "neg":
            x = self.of(e.x)
            return None if x is None else -x
        if not (isinstance(e, BinOp) and e.dtype == "int64"):
            return None
        a, b = self.of(e.a), self.of(e.b)
        if a is None or b is None:
            return None
        op = e.operator
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul":
            return a * b
        if op in ("floordiv", "mod"):
            if not self.positive(b):
                return None  # x // 0 is 0 in loop IR: the identities below need d >= 1
            quotient = self.quotient(a, b)
            return quotient if op == "floordiv" else a - b * quotient  # x % d == x - d*(x // d)
        if op in ("min", "max"):
            return Poly.atom(OpaqueAtom(op, *sorted((a, b), key=str)))
        return None

    def quotient(self, x: Poly, d: Poly) -> Poly:
        """The form of `x // d` for d >= 1."""
        # (q*d + r) // d == q + r // d: the terms d divides leave the quotient
        divisible, rest = _split_multiples(x, d)
        return divisible + self._quotient_of_rest(rest, d) if rest.terms else divisible

    def _quotient_of_rest(self, rest: Poly, d: Poly) -> Poly:
        if len(rest.terms) == 1:  # (y // a) // d == y // (a*d) for positive a, d
            (monomial, coeff), = rest.terms
            if coeff == 1 and len(monomial) == 1 and isinstance(monomial[0], OpaqueAtom) \
                    and monomial[0].op == "floordiv":
                return self.quotient(monomial[0].a, monomial[0].b * d)
        if self.nonnegative(rest) and self.less_than(rest, d):
            return Poly.constant(0)  # 0 <= rest < d
        return Poly.atom(OpaqueAtom("floordiv", rest, d))

    # ---- bounds: polynomials over the size symbols
    def upper(self, p: Poly) -> Optional[Poly]:
        return self._bound(p, upper=True)

    def lower(self, p: Poly) -> Optional[Poly]:
        return self._bound(p, upper=False)

    def _bound(self, p: Poly, upper: bool) -> Optional[Poly]:
        """A bound of `p` over the symbols; each term's atoms must be non-negative (then a term is monotone)."""
        total = Poly.constant(0)
        for monomial, coeff in p.terms:
            term = Poly.constant(coeff)
            for atom in monomial:
                low = self._atom_bound(atom, upper=False)
                if low is None or not _nonnegative_over_symbols(low):
                    return None
                # a positive coefficient grows with the atom, a negative one shrinks
                bound = self._atom_bound(atom, upper=(coeff > 0) == upper)
                if bound is None:
                    return None
                term = term * bound
            total = total + term
        return total

    def _atom_bound(self, atom, upper: bool) -> Optional[Poly]:
        if isinstance(atom, str):
            if is_size_var(atom):
                return Poly.atom(atom)  # fixed for a call
            extent = self.extents.get(atom)
            if extent is None:
                return None
            if not upper:
                return Poly.constant(0)
            form = self.of(extent)
            return None if form is None else form - Poly.constant(1)
        if atom.op == "floordiv":  # 0 <= y // d <= y for y >= 0, d >= 1
            if not self.nonnegative(atom.a):
                return None
            return self.upper(atom.a) if upper else Poly.constant(0)
        return None

    # ---- facts
    def nonnegative(self, p: Poly) -> bool:
        low = self.lower(p)
        return low is not None and _nonnegative_over_symbols(low)

    def positive(self, p: Poly) -> bool:
        return self.nonnegative(p - Poly.constant(1))

    def less_than(self, x: Poly, d: Poly) -> bool:
        """x < d for every value: d's lower bound exceeds x's upper bound."""
        high, low = self.upper(x), self.lower(d)
        return high is not None and low is not None and _nonnegative_over_symbols(low - high - Poly.constant(1))


def _split_multiples(x: Poly, d: Poly) -> tuple[Poly, Poly]:
    """(q, r) with x == q*d + r: q from the terms the monomial `d` divides exactly, r the others."""
    quotient, rest = {}, {}
    for monomial, coeff in x.terms:
        q = Poly(((monomial, coeff),)).exact_quotient(d)
        if q is not None:
            (qm, qc), = q.terms or (((), 0),)
            quotient[qm] = quotient.get(qm, 0) + qc
        else:
            rest[monomial] = rest.get(monomial, 0) + coeff
    return Poly._from(quotient), Poly._from(rest)


def _nonnegative_over_symbols(p: Poly) -> bool:
    """True when `p`, a polynomial over size symbols, is >= 0 for every symbol value >= SYMBOL_MIN."""
    shifted = Poly.constant(0)
    for monomial, coeff in p.terms:
        term = Poly.constant(coeff)
        for atom in monomial:
            if not (isinstance(atom, str) and is_size_var(atom)):
                return False
            term = term * (Poly.constant(SYMBOL_MIN) + Poly.atom(atom + _SHIFTED))
        shifted = shifted + term
    return all(coeff >= 0 for _, coeff in shifted.terms)

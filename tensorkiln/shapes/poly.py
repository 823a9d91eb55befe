"""Canonical polynomials over size symbols: the value a SymInt holds.

A size expression is a sum of monomials with integer coefficients. A monomial
is a sorted tuple of atoms; an atom is a size symbol's name or an opaque
operation that is not a polynomial (`floordiv`, `mod`, `min`, `max` of two
polynomials). One value has one spelling, so `4*s*t == t*s*4` is decided by
comparing tuples, and hashing a SymInt hashes this form (never its hint).

`Poly.terms` is a tuple of (monomial, coefficient) sorted by monomial, with no
zero coefficients; the constant term has the empty monomial.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Union

from tensorkiln.loops import expr as E

Atom = Union[str, "OpaqueAtom"]
Monomial = tuple  # tuple[Atom, ...], sorted by _atom_key
INF = math.inf


@dataclass(frozen=True)
class OpaqueAtom:
    """`op(a, b)` for an operation polynomials are not closed under: floordiv, mod, min, max."""

    op: str
    a: "Poly"
    b: "Poly"

    def __str__(self) -> str:
        if self.op in ("min", "max"):
            return f"{self.op}({self.a}, {self.b})"
        symbol = "//" if self.op == "floordiv" else "%"
        return f"({_group(self.a)} {symbol} {_group(self.b)})"  # parenthesized: `-16*((-seq) // 16)`


def _group(p: "Poly") -> str:
    """`p` as text, in parentheses unless it is one symbol or a non-negative constant."""
    text = str(p)
    return text if text.isidentifier() or text.isdigit() else f"({text})"


def _atom_key(atom: Atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else (1, str(atom))


@dataclass(frozen=True)
class Poly:
    """A canonical polynomial with integer coefficients over size symbols and opaque atoms."""

    terms: tuple  # tuple[tuple[Monomial, int], ...]

    # ---- construction
    @staticmethod
    def constant(value: int) -> "Poly":
        return Poly(((((), int(value)),) if value else ()))

    @staticmethod
    def atom(atom: Atom) -> "Poly":
        return Poly((((atom,), 1),))

    @staticmethod
    def _from(terms: dict) -> "Poly":
        return Poly(tuple(sorted(((m, c) for m, c in terms.items() if c),
                                 key=lambda t: tuple(_atom_key(a) for a in t[0]))))

    # ---- queries
    @property
    def is_constant(self) -> bool:
        return all(not m for m, _ in self.terms)

    @property
    def constant_term(self) -> int:
        return next((c for m, c in self.terms if not m), 0)

    def symbols(self) -> set[str]:
        """Names of the size symbols this polynomial reads (inside opaque atoms too)."""
        found: set[str] = set()
        for monomial, _ in self.terms:
            for atom in monomial:
                if isinstance(atom, str):
                    found.add(atom)
                else:
                    found |= atom.a.symbols() | atom.b.symbols()
        return found

    # ---- arithmetic
    def __add__(self, other: "Poly") -> "Poly":
        terms = dict(self.terms)
        for m, c in other.terms:
            terms[m] = terms.get(m, 0) + c
        return Poly._from(terms)

    def __neg__(self) -> "Poly":
        return Poly(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        terms: dict = {}
        for m1, c1 in self.terms:
            for m2, c2 in other.terms:
                m = tuple(sorted(m1 + m2, key=_atom_key))
                terms[m] = terms.get(m, 0) + c1 * c2
        return Poly._from(terms)

    def exact_quotient(self, other: "Poly") -> "Poly | None":
        """self / other when `other` is one monomial dividing every term exactly, else None."""
        if len(other.terms) != 1:
            return None
        (divisor, k), = other.terms
        if k <= 0:
            return None
        terms = {}
        for monomial, c in self.terms:
            rest = list(monomial)
            for atom in divisor:
                if atom not in rest:
                    return None
                rest.remove(atom)
            if c % k:
                return None
            terms[tuple(rest)] = c // k
        return Poly._from(terms)

    def floordiv(self, other: "Poly") -> "Poly":
        exact = self.exact_quotient(other)
        if exact is not None:
            return exact
        if other.is_constant and other.constant_term > 0:
            # (k*p + c) // k == p + c // k when k divides every non-constant coefficient
            k = other.constant_term
            if all(c % k == 0 for m, c in self.terms if m):
                return Poly._from({m: c // k for m, c in self.terms if m}) + Poly.constant(self.constant_term // k)
        if self.is_constant and other.is_constant and other.constant_term:
            return Poly.constant(self.constant_term // other.constant_term)
        return Poly.atom(OpaqueAtom("floordiv", self, other))

    def mod(self, other: "Poly") -> "Poly":
        if self.exact_quotient(other) is not None:
            return Poly.constant(0)
        if other.is_constant and other.constant_term > 0:
            k = other.constant_term
            if all(c % k == 0 for m, c in self.terms if m):
                return Poly.constant(self.constant_term % k)
        if self.is_constant and other.is_constant and other.constant_term:
            return Poly.constant(self.constant_term % other.constant_term)
        return Poly.atom(OpaqueAtom("mod", self, other))

    # ---- values
    def evaluate(self, values: Mapping[str, int]) -> int:
        """The integer value with each symbol's value from `values` (numpy's floor semantics)."""
        total = 0
        for monomial, c in self.terms:
            product = c
            for atom in monomial:
                product *= values[atom] if isinstance(atom, str) else _evaluate_atom(atom, values)
            total += product
        return total

    def interval(self, ranges: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
        """Inclusive [lo, hi] of the values over symbols in their `ranges` (+-inf when unbounded)."""
        lo = hi = 0
        for monomial, c in self.terms:
            mlo, mhi = float(c), float(c)
            for atom in monomial:
                alo, ahi = ranges[atom] if isinstance(atom, str) else _atom_interval(atom, ranges)
                corners = [_mul(x, y) for x in (mlo, mhi) for y in (alo, ahi)]
                mlo, mhi = min(corners), max(corners)
            lo, hi = lo + mlo, hi + mhi
        return lo, hi

    # ---- rendering
    def to_expr(self) -> E.Expr:
        """The loop-IR index expression (int64) of this polynomial, symbols as `s_<name>` Vars."""
        total = None
        for monomial, c in self.terms:
            term = None
            for atom in monomial:
                factor = E.Var(symbol_var_name(atom)) if isinstance(atom, str) else _atom_expr(atom)
                term = factor if term is None else term * factor
            if term is None:
                term = E.Const(c)
            elif c != 1:
                term = term * c
            total = term if total is None else total + term
        return total if total is not None else E.Const(0)

    def __str__(self) -> str:
        parts = []
        for monomial, c in sorted(self.terms, key=lambda t: not t[0]):  # the constant last: `seq + 1`
            names = [a if isinstance(a, str) else str(a) for a in monomial]
            if not names:
                parts.append(str(c))
            elif c == 1:
                parts.append("*".join(names))
            elif c == -1:
                parts.append("-" + "*".join(names))
            else:
                parts.append(f"{c}*" + "*".join(names))
        text = " + ".join(parts) if parts else "0"
        return text.replace("+ -", "- ")


SYMBOL_PREFIX = "s_"  # a size symbol's variable in loop IR and C (see loops/expr_nodes.py is_size_var)


def symbol_var_name(name: str) -> str:
    """The loop-IR variable of size symbol `name`: `s_<name>`."""
    return SYMBOL_PREFIX + name


def _mul(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b


def _evaluate_atom(atom: OpaqueAtom, values: Mapping[str, int]) -> int:
    a, b = atom.a.evaluate(values), atom.b.evaluate(values)
    if atom.op == "min":
        return min(a, b)
    if atom.op == "max":
        return max(a, b)
    if b == 0:
        return 0  # the loop IR's integer division by zero
    return a // b if atom.op == "floordiv" else a % b


def _atom_interval(atom: OpaqueAtom, ranges) -> tuple[float, float]:
    (alo, ahi), (blo, bhi) = atom.a.interval(ranges), atom.b.interval(ranges)
    if atom.op == "min":
        return min(alo, blo), min(ahi, bhi)
    if atom.op == "max":
        return max(alo, blo), max(ahi, bhi)
    if atom.op == "mod" and blo > 0:
        return 0, bhi - 1
    if atom.op == "floordiv" and blo == bhi and blo > 0:  # by a positive constant: monotone
        return alo // blo if alo != -INF else -INF, ahi // blo if ahi != INF else INF
    if atom.op == "floordiv" and blo > 0 and alo >= 0:
        return alo // bhi if bhi != INF else 0, ahi // blo if ahi != INF else INF
    return -INF, INF


def _atom_expr(atom: OpaqueAtom) -> E.Expr:
    a, b = atom.a.to_expr(), atom.b.to_expr()
    if atom.op == "min":
        return E.minimum(a, b)
    if atom.op == "max":
        return E.maximum(a, b)
    return a // b if atom.op == "floordiv" else a % b

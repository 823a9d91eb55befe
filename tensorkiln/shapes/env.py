"""ShapeEnv: the size symbols of one trace, where each comes from, and the guards recorded on them.

A symbol is created for an input axis (its source: input name and position,
axis) with the size seen at trace time as its hint. Symbols are >= 2 (sizes
0 and 1 specialize, as in torch) and may carry user bounds (`Dim`). Every
decision a SymInt could not make from the bounds alone is answered from the
hints and recorded as a `Guard`; a compiled program applies to a call only
when its guards hold for the call's sizes. A guard that pins a symbol to one
value or range narrows the bounds used for later decisions, so one
specialization records one guard, not one per question.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Mapping

from tensorkiln.errors import ShapeError
from tensorkiln.shapes.poly import Poly
from tensorkiln.shapes.symint import SymInt

MIN_SIZE = 2  # sizes 0 and 1 are never symbolic (broadcasting and empty tensors behave differently)
MAX_SIZE = 2 ** 31 - 1  # default upper bound, so products of two symbols stay within int64
_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_HERE)

_OPS = {"==": lambda v: v == 0, "!=": lambda v: v != 0, "<": lambda v: v < 0, "<=": lambda v: v <= 0,
        ">": lambda v: v > 0, ">=": lambda v: v >= 0}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class Dim:
    """A named dynamic dimension with optional bounds, as torch.export's Dim: `tk.Dim("seq", max=4096)`."""

    name: str
    min: int | None = None
    max: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Dim name must be an identifier, got {self.name!r}")
        low, high = self.min if self.min is not None else MIN_SIZE, self.max if self.max is not None else MAX_SIZE
        if low > high:
            raise ValueError(f"Dim {self.name}: min {low} is larger than max {high}")


@dataclass
class SizeSymbol:
    """One size symbol: its name, the input axes it stands for, its hint and bounds."""

    name: str
    hint: int
    sources: list[tuple[str, int, int]]  # (input name, input position, axis)
    lo: int = MIN_SIZE
    hi: int = MAX_SIZE

    def describe(self) -> str:
        where = ", ".join(f"{name}.shape[{axis}]" for name, _, axis in self.sources)
        bounds = f" in [{self.lo}, {self.hi}]" if (self.lo, self.hi) != (MIN_SIZE, MAX_SIZE) else ""
        return f"{self.name} = {where} (hint {self.hint}){bounds}"


@dataclass(frozen=True)
class Guard:
    """`poly op 0` must hold for a program to apply; `text` is the relation as decided, `where` the code."""

    poly: Poly
    op: str
    text: str
    where: str

    def holds(self, values: Mapping[str, int]) -> bool:
        return _OPS[self.op](self.poly.evaluate(values))

    def __str__(self) -> str:
        return f"{self.text}   ({self.where})"


@dataclass
class ShapeEnv:
    """The size symbols and guards of one trace (and so of the program compiled from it)."""

    symbols: dict[str, SizeSymbol] = field(default_factory=dict)
    guards: list[Guard] = field(default_factory=list)
    _ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    _seen: set = field(default_factory=set)

    # ---- symbols
    def symbol(self, name: str, hint: int, source: tuple[str, int, int], lo: int | None = None,
               hi: int | None = None) -> SymInt:
        """The SymInt of symbol `name` (created on first use), with `source` added to its sources."""
        found = self.symbols.get(name)
        if found is None:
            found = SizeSymbol(name, int(hint), [], max(lo or MIN_SIZE, MIN_SIZE), hi or MAX_SIZE)
            self.symbols[name] = found
            self._ranges[name] = (found.lo, found.hi)
        found.sources.append(source)
        return SymInt(Poly.atom(name), found.hint, self)

    def values_from(self, shapes: list[tuple[int, ...]], names: list[str] | None = None) -> dict[str, int]:
        """Each symbol's value read from the input `shapes`; a ShapeError when two sources disagree."""
        values: dict[str, int] = {}
        first: dict[str, tuple[str, int]] = {}
        for symbol in self.symbols.values():
            for name, position, axis in symbol.sources:
                size = int(shapes[position][axis])
                if symbol.name not in values:
                    values[symbol.name], first[symbol.name] = size, (name, axis)
                elif values[symbol.name] != size:
                    other, other_axis = first[symbol.name]
                    raise ShapeError(f"inputs {other} and {name} share the size {symbol.name} (their axes "
                                     f"{other_axis} and {axis}) but have sizes {values[symbol.name]} and {size}: "
                                     f"{other} has shape {tuple(shapes[first_position(symbol, other)])}, "
                                     f"{name} has shape {tuple(shapes[position])}")
        return values

    def check(self, values: Mapping[str, int]) -> bool:
        """True when every guard holds for these symbol values."""
        return all(g.holds(values) for g in self.guards)

    def bound_violations(self, values: Mapping[str, int]) -> list[str]:
        """The symbols whose `values` fall outside their bounds, as text."""
        return [f"{s.name} = {values[s.name]} outside [{s.lo}, {s.hi}]" for s in self.symbols.values()
                if s.name in values and not s.lo <= values[s.name] <= s.hi]

    # ---- decisions
    def interval(self, poly: Poly) -> tuple[float, float]:
        """The values `poly` can take within the current bounds (narrowed by guards)."""
        return poly.interval(self._ranges)

    def decide(self, poly: Poly, op: str, answer: bool) -> bool:
        """Whether `poly op 0`: from the bounds when they decide, else `answer` (from the hints), guarded."""
        lo, hi = self.interval(poly)
        decided = _decided(op, lo, hi)
        if decided is not None:
            return decided
        self.record(poly, op if answer else _NEGATED[op])
        return answer

    def specialize(self, value: SymInt) -> None:
        """Guard `value == its hint` (a conversion to a concrete int)."""
        lo, hi = self.interval(value.poly)
        if lo == hi:
            return
        self.record(value.poly - Poly.constant(value.hint), "==")

    def record(self, poly: Poly, op: str) -> None:
        key = (poly, op)
        if key in self._seen:
            return
        self._seen.add(key)
        text = _relation_text(poly, op)
        self.guards.append(Guard(poly, op, text, _caller()))
        self._narrow(poly, op)

    def _narrow(self, poly: Poly, op: str) -> None:
        """Tighten a symbol's range from a guard `a*s + c op 0` on that one symbol."""
        variable = [(m, c) for m, c in poly.terms if m]
        if len(variable) != 1 or len(variable[0][0]) != 1 or not isinstance(variable[0][0][0], str):
            return
        (monomial, a), c = variable[0], poly.constant_term
        name = monomial[0]
        lo, hi = self._ranges[name]
        if op == "==" and c % a == 0:
            lo = hi = -c // a
        elif op in ("<", "<=", ">", ">="):
            # a*s + c op 0  ->  s op' -c/a  (flipped for negative a)
            if a < 0:
                a, c, op = -a, -c, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
            bound = -c / a
            if op == "<":
                hi = min(hi, int(-(-bound // 1)) - 1)
            elif op == "<=":
                hi = min(hi, int(bound // 1))
            elif op == ">":
                lo = max(lo, int(bound // 1) + 1)
            else:
                lo = max(lo, int(-(-bound // 1)))
        self._ranges[name] = (lo, hi)

    def specialized(self) -> dict[str, int]:
        """Symbols pinned to one value by a guard: name -> value."""
        return {name: int(lo) for name, (lo, hi) in self._ranges.items() if lo == hi}

    def describe(self) -> str:
        """The symbols (with sources and hints) and the guards, for explain()."""
        lines = ["size symbols:"] + [f"  {s.describe()}" for s in self.symbols.values()]
        pinned = self.specialized()
        if pinned:
            lines.append("  specialized by a guard: " + ", ".join(f"{n} = {v}" for n, v in pinned.items()))
        lines.append(f"guards ({len(self.guards)}):" if self.guards else "guards: none")
        lines += [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def first_position(symbol: SizeSymbol, name: str) -> int:
    return next(position for n, position, _ in symbol.sources if n == name)


def _decided(op: str, lo: float, hi: float) -> bool | None:
    if op == "==":
        return True if lo == hi == 0 else (False if lo > 0 or hi < 0 else None)
    if op == "!=":
        return False if lo == hi == 0 else (True if lo > 0 or hi < 0 else None)
    if op == "<":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "<=":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == ">":
        return True if lo > 0 else (False if hi <= 0 else None)
    return True if lo >= 0 else (False if hi < 0 else None)  # >=


def _relation_text(poly: Poly, op: str) -> str:
    """`poly op 0` written as `terms op constant`, the way a reader states it (`s_seq == 7`)."""
    constant = poly.constant_term
    rest = poly - Poly.constant(constant)
    return f"{rest} {op} {-constant}"


def _caller() -> str:
    """file:line of the code that asked for a concrete value (the first frame outside shapes/)."""
    frame = sys._getframe(2)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    if frame is None:
        return "?"
    path = os.path.abspath(frame.f_code.co_filename)
    if path.startswith(_PACKAGE):
        path = "tensorkiln" + path[len(_PACKAGE):]
    else:
        path = os.path.basename(path)
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"

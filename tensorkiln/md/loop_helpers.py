"""Small constructors that keep the MD kernels' loop IR readable: float64 constants, int64 indices,
and per-coordinate loads and stores of [n, 3] arrays."""
from __future__ import annotations

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Const, Expr, Load, Var, cast
from tensorkiln.loops.ir import Let, Stmt, Store

F64 = "float64"
# Below this many atoms per thread a parallel loop costs more in thread wake-ups than it saves.
MIN_ATOMS_PER_THREAD = 2048
I64 = "int64"


def f64(value: float) -> Const:
    """A float64 constant."""
    return Const(float(value), F64)


def i64(value: int) -> Const:
    """An int64 (index) constant."""
    return Const(int(value), I64)


def index(expr: Expr) -> Expr:
    """`expr` as an int64 index (loads of int32 neighbour data are widened)."""
    return cast(expr, I64)


def load3(buffer: Buffer, atom: Expr, dim: int) -> Expr:
    """Coordinate `dim` of `atom` in an [n, 3] buffer."""
    return Load(buffer, atom * 3 + dim)


def store3(buffer: Buffer, atom: Expr, dim: int, value: Expr) -> Stmt:
    """Set coordinate `dim` of `atom` in an [n, 3] buffer."""
    return Store(buffer, atom * 3 + dim, value)


def let(name: str, value: Expr) -> tuple[Let, Var]:
    """Declare the local `name = value`; returns the statement and the variable to read it by."""
    var = Var(name, value.dtype)
    return Let(var, value), var


def atom_loop_kind(atoms: int, threads: int) -> str:
    """"parallel" for a loop over `atoms` when `threads` threads have enough work, else "serial"."""
    return "parallel" if threads > 1 and atoms >= MIN_ATOMS_PER_THREAD * threads else "serial"


def let_position(x: Buffer, atom: Expr) -> tuple[list[Stmt], list[Var]]:
    """Declare xi, yi, zi = the coordinates of `atom` in x; returns the statements and the variables."""
    decls: list[Stmt] = []
    position: list[Var] = []
    for d, name in enumerate("xyz"):
        decl, var = let(f"{name}i", load3(x, atom, d))
        decls.append(decl)
        position.append(var)
    return decls, position


def let_cell_coordinates(home: Expr, counts: tuple[int, int, int]) -> tuple[list[Stmt], list[Var]]:
    """Declare cx, cy, cz = the coordinates of the flat cell `home` in a grid of `counts` cells per axis
    (x fastest); returns the statements and the variables."""
    nx, ny, _ = counts
    decls: list[Stmt] = []
    coordinates: list[Var] = []
    for d, coordinate in enumerate([home % nx, (home // nx) % ny, home // (nx * ny)]):
        decl, var = let(f"c{'xyz'[d]}", coordinate)
        decls.append(decl)
        coordinates.append(var)
    return decls, coordinates

"""Loop-IR kernels of the velocity-Verlet integrator (LAMMPS's `fix nve`) and the per-step reductions.

A step is: `initial_integrate` (v += dt/2 f/m; x += dt v; f = 0), forces at the new
positions, `final_integrate` (v += dt/2 f/m). `final_integrate` also sums
m v^2 over atoms (twice the kinetic energy, for the thermo output), and
`largest_displacement` returns the largest squared distance an atom has moved
since the last neighbour-list build (the `check yes` rebuild criterion).
Between two steps of a run, `final_then_initial` does one step's second half
and the next one's first half in one pass.
"""
from __future__ import annotations

from tensorkiln.loops.buffer import Buffer
from tensorkiln.loops.expr import Var, maximum
from tensorkiln.loops.ir import Assign, For, Kernel, Let, Store, block
from tensorkiln.md.loop_helpers import F64, atom_loop_kind, f64, i64, load3, store3


def _buffers(atoms: int) -> tuple[Buffer, Buffer, Buffer]:
    return Buffer("x", F64, (atoms, 3)), Buffer("v", F64, (atoms, 3)), Buffer("f", F64, (atoms, 3))


def initial_integrate(atoms: int, dt: float, mass: float, threads: int = 1) -> Kernel:
    """First half-kick and drift: v += (dt/2) f/m; x += dt v; then f = 0 for the force kernels to add into
    (clearing each force while it is in cache saves the force kernel a pass over the array)."""
    x, v, f = _buffers(atoms)
    i = Var("i")
    dtf_m = 0.5 * dt / mass
    stmts = []
    for d, name in enumerate("xyz"):
        velocity = Var(f"v{name}", F64)
        stmts += [Let(velocity, load3(v, i, d) + f64(dtf_m) * load3(f, i, d)),
                  store3(v, i, d, velocity),
                  store3(x, i, d, load3(x, i, d) + f64(dt) * velocity),
                  store3(f, i, d, f64(0.0))]
    return Kernel("initial_integrate", (f, x, v), For(i, atoms, block(*stmts), atom_loop_kind(atoms, threads)),
                  f"velocity Verlet, first half, and f cleared: dt={dt:g}, mass={mass:g}")


def final_integrate(atoms: int, dt: float, mass: float, threads: int = 1) -> Kernel:
    """Second half-kick, v += (dt/2) f/m, and kinetic[0] = sum of m v^2."""
    _, v, f = _buffers(atoms)
    kinetic = Buffer("kinetic", F64, (1,))
    i = Var("i")
    total = Var("mvv", F64)
    dtf_m = 0.5 * dt / mass
    stmts = []
    for d, name in enumerate("xyz"):
        velocity = Var(f"v{name}", F64)
        stmts += [Let(velocity, load3(v, i, d) + f64(dtf_m) * load3(f, i, d)),
                  store3(v, i, d, velocity),
                  Assign(total, total + f64(mass) * (velocity * velocity))]
    body = block(Let(total, f64(0.0)), For(i, atoms, block(*stmts), atom_loop_kind(atoms, threads)), Store(kinetic, i64(0), total))
    return Kernel("final_integrate", (f, v, kinetic), body,
                  f"velocity Verlet, second half, and sum of m v^2: dt={dt:g}, mass={mass:g}")


def final_then_initial(atoms: int, dt: float, mass: float, threads: int = 1) -> Kernel:
    """The second half of one step and the first half of the next in one pass over the atoms: both kicks use
    the same forces, so this is `final_integrate` then `initial_integrate` with the same arithmetic in the
    same order (kinetic[0] is the sum of m v^2 between them), one parallel loop instead of two."""
    x, v, f = _buffers(atoms)
    kinetic = Buffer("kinetic", F64, (1,))
    i = Var("i")
    total = Var("mvv", F64)
    dtf_m = 0.5 * dt / mass
    stmts = []
    for d, name in enumerate("xyz"):
        half, whole = Var(f"v{name}_end", F64), Var(f"v{name}", F64)
        stmts += [Let(half, load3(v, i, d) + f64(dtf_m) * load3(f, i, d)),
                  Assign(total, total + f64(mass) * (half * half)),
                  Let(whole, half + f64(dtf_m) * load3(f, i, d)),
                  store3(v, i, d, whole),
                  store3(x, i, d, load3(x, i, d) + f64(dt) * whole),
                  store3(f, i, d, f64(0.0))]
    body = block(Let(total, f64(0.0)), For(i, atoms, block(*stmts), atom_loop_kind(atoms, threads)),
                 Store(kinetic, i64(0), total))
    return Kernel("final_then_initial", (f, x, v, kinetic), body,
                  f"velocity Verlet, second half of a step (and sum of m v^2), first half of the next, f cleared: "
                  f"dt={dt:g}, mass={mass:g}")


def kinetic_sum(atoms: int, mass: float, threads: int = 1) -> Kernel:
    """kinetic[0] = sum of m v^2 (the thermo output before the first step)."""
    _, v, _ = _buffers(atoms)
    kinetic = Buffer("kinetic", F64, (1,))
    i = Var("i")
    total = Var("mvv", F64)
    squares = None
    for d in range(3):
        term = load3(v, i, d) * load3(v, i, d)
        squares = term if squares is None else squares + term
    body = block(Let(total, f64(0.0)), For(i, atoms, Assign(total, total + f64(mass) * squares), atom_loop_kind(atoms, threads)),
                 Store(kinetic, i64(0), total))
    return Kernel("kinetic_sum", (v, kinetic), body, f"sum of m v^2, mass={mass:g}")


def largest_displacement(atoms: int, threads: int = 1) -> Kernel:
    """moved[0] = the largest |x - x_hold|^2 over atoms."""
    x = Buffer("x", F64, (atoms, 3))
    hold = Buffer("x_hold", F64, (atoms, 3))
    moved = Buffer("moved", F64, (1,))
    i = Var("i")
    most = Var("most", F64)
    squared = None
    for d in range(3):
        delta = load3(x, i, d) - load3(hold, i, d)
        squared = delta * delta if squared is None else squared + delta * delta
    body = block(Let(most, f64(0.0)), For(i, atoms, Assign(most, maximum(most, squared)), atom_loop_kind(atoms, threads)),
                 Store(moved, i64(0), most))
    return Kernel("largest_displacement", (x, hold, moved), body,
                  "largest squared displacement since the last neighbour-list build")

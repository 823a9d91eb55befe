"""A reader for the subset of LAMMPS input scripts that the Lennard-Jones benchmarks use.

Commands: units lj, atom_style atomic, dimension 3, boundary p p p, lattice
fcc|bcc|sc RHO, region ID block ..., create_box 1 ID, create_atoms 1 box|region
ID, mass 1 M, velocity all create T SEED loop geom, pair_style lj/cut RC,
pair_coeff 1 1 EPS SIGMA [RC], pair_modify shift yes|no, neighbor SKIN bin,
neigh_modify delay|every|check, fix ID all nve, timestep DT, thermo N, run N;
and `variable NAME index|equal VALUE` with `$x` / `${name}` substitution, as
LAMMPS's bench/in.lj uses them. Anything else is an `MDInputError` naming the
line; a run prints the thermo table and LAMMPS's "Loop time" line.
"""
from __future__ import annotations

import ast
import operator
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from tensorkiln.md.decomposed import DecomposedSimulation
from tensorkiln.md.lattice import Box, Lattice, MDInputError, block_region, create_atoms
from tensorkiln.md.pair_lj import LJCut
from tensorkiln.md.simulation import DangerousBuildWarning, NeighborSettings, RunResult, Simulation
from tensorkiln.md.system import System

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z0-9_])")
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
               ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _arithmetic(text: str) -> float:
    """Evaluate numbers combined with + - * / ^ and parentheses (a LAMMPS equal-style formula)."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported formula {text!r}: only numbers, + - * / ^ and parentheses")
    return value(ast.parse(text.replace("^", "**"), mode="eval").body)


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass
class ScriptState:
    """What the commands so far have set up."""

    variables: dict[str, str] = field(default_factory=dict)
    lattice: Optional[Lattice] = None
    regions: dict[str, Box] = field(default_factory=dict)
    box: Optional[Box] = None
    system: Optional[System] = None
    mass: Optional[float] = None
    pair_cutoff: Optional[float] = None
    pair: Optional[LJCut] = None
    shift: bool = False
    skin: float = 0.3
    delay: int = 0
    every: int = 1
    check: bool = True
    integrator: bool = False
    dt: float = 0.005
    thermo_every: int = 0
    simulation: Optional[Simulation] = None
    runs: list[RunResult] = field(default_factory=list)


class InputScript:
    """Runs LAMMPS commands one line at a time; `out` receives every line of output."""

    def __init__(self, out: Callable[[str], None] = print, variables: Optional[dict[str, str]] = None,
                 threads: Optional[int] = None, ranks: int = 1, rank: int = 0, timing: bool = False):
        self.out = out
        self.threads = threads
        self.timing = timing  # print each run's timing breakdown after its Loop time line
        self.ranks, self.rank = ranks, rank  # several MPI ranks: each runs its sub-box (decomposed.py)
        self.state = ScriptState(variables=dict(variables or {}))
        self._fixed_variables = set(self.state.variables)  # set on the command line: `variable` does not override

    # ---- reading

    def run_file(self, path: str) -> ScriptState:
        """Run every command of the file at `path`."""
        with open(path) as handle:
            return self.run_text(handle.read(), path)

    def run_text(self, text: str, name: str = "<input>") -> ScriptState:
        """Run every command of `text`."""
        pending, first = "", 0
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].rstrip()
            if line.endswith("&"):  # continued on the next line
                pending, first = pending + line[:-1] + " ", first or number
                continue
            line, start = pending + line, first or number
            pending, first = "", 0
            if line.strip():
                self.command(line, f"{name}:{start}")
        return self.state

    def command(self, line: str, where: str = "<input>") -> None:
        """Run one command; errors name `where` and the line."""
        try:
            words = self._substitute(line).split()
            handler = getattr(self, "_cmd_" + words[0].replace("/", "_"), None)
            if handler is None:
                raise MDInputError(f"command {words[0]!r} is not supported (tensorkiln md reads the Lennard-Jones "
                                   "benchmark subset of LAMMPS: see docs/md.md)")
            handler(words[1:])
        except MDInputError as error:
            raise MDInputError(f"{where}: {line.strip()}\n  {error}") from None
        except (ValueError, IndexError) as error:
            raise MDInputError(f"{where}: {line.strip()}\n  malformed command: {error}") from None

    def _substitute(self, line: str) -> str:
        def replace(match: re.Match) -> str:
            name = match.group(1) or match.group(2)
            if name not in self.state.variables:
                raise MDInputError(f"variable {name!r} is not defined")
            return self.state.variables[name]
        return _VARIABLE.sub(replace, line)

    # ---- argument helpers

    @staticmethod
    def _expect(args: list[str], count: int, usage: str) -> None:
        if len(args) != count:
            raise MDInputError(f"expected `{usage}`")

    @staticmethod
    def _only(value: str, allowed: tuple[str, ...], what: str) -> str:
        if value not in allowed:
            raise MDInputError(f"{what} {value!r} is not supported; supported: {', '.join(allowed)}")
        return value

    # ---- commands

    def _cmd_variable(self, args: list[str]) -> None:
        if len(args) < 3:
            raise MDInputError("expected `variable NAME index|equal VALUE`")
        name, style, rest = args[0], args[1], " ".join(args[2:])
        self._only(style, ("index", "equal"), "variable style")
        if name in self._fixed_variables:
            return
        self.state.variables[name] = args[2] if style == "index" else _number_text(_arithmetic(rest))

    def _cmd_units(self, args: list[str]) -> None:
        self._expect(args, 1, "units lj")
        self._only(args[0], ("lj",), "units")

    def _cmd_atom_style(self, args: list[str]) -> None:
        self._expect(args, 1, "atom_style atomic")
        self._only(args[0], ("atomic",), "atom_style")

    def _cmd_dimension(self, args: list[str]) -> None:
        self._expect(args, 1, "dimension 3")
        self._only(args[0], ("3",), "dimension")

    def _cmd_boundary(self, args: list[str]) -> None:
        if args != ["p", "p", "p"]:
            raise MDInputError("only periodic boundaries are supported: `boundary p p p`")

    def _cmd_lattice(self, args: list[str]) -> None:
        self._expect(args, 2, "lattice fcc|bcc|sc DENSITY")
        self.state.lattice = Lattice.from_density(self._only(args[0], ("fcc", "bcc", "sc"), "lattice style"),
                                                  float(args[1]))

    def _cmd_region(self, args: list[str]) -> None:
        if len(args) not in (8, 10) or args[1] != "block":
            raise MDInputError("expected `region ID block xlo xhi ylo yhi zlo zhi [units lattice|box]`")
        bounds = tuple(float(v) for v in args[2:8])
        units = "lattice"
        if len(args) == 10:
            if args[8] != "units":
                raise MDInputError(f"region keyword {args[8]!r} is not supported (only `units`)")
            units = self._only(args[9], ("lattice", "box"), "region units")
        if units == "box":
            self.state.regions[args[0]] = Box(bounds[0::2], bounds[1::2])  # type: ignore[arg-type]
            return
        if self.state.lattice is None:
            raise MDInputError("a region in lattice units needs a `lattice` command first")
        self.state.regions[args[0]] = block_region(self.state.lattice, bounds)  # type: ignore[arg-type]

    def _region(self, name: str) -> Box:
        if name not in self.state.regions:
            raise MDInputError(f"region {name!r} is not defined")
        return self.state.regions[name]

    def _cmd_create_box(self, args: list[str]) -> None:
        self._expect(args, 2, "create_box 1 REGION")
        if args[0] != "1":
            raise MDInputError("only one atom type is supported: `create_box 1 REGION`")
        if self.state.box is not None:
            raise MDInputError("the box exists already")
        self.state.box = self._region(args[1])

    def _cmd_create_atoms(self, args: list[str]) -> None:
        if self.state.box is None or self.state.lattice is None:
            raise MDInputError("create_atoms needs `lattice` and `create_box` first")
        if args[:2] == ["1", "box"] and len(args) == 2:
            region = None
        elif args[:2] == ["1", "region"] and len(args) == 3:
            region = self._region(args[2])
        else:
            raise MDInputError("expected `create_atoms 1 box` or `create_atoms 1 region ID`")
        new = create_atoms(self.state.lattice, self.state.box, region)
        old = self.state.system.positions if self.state.system is not None else np.zeros((0, 3))
        self.state.system = System(self.state.box, np.concatenate([old, new]), self.state.mass or 1.0)

    def _cmd_mass(self, args: list[str]) -> None:
        self._expect(args, 2, "mass 1 VALUE")
        if args[0] not in ("1", "*"):
            raise MDInputError("only one atom type is supported: `mass 1 VALUE`")
        self.state.mass = float(args[1])
        if self.state.system is not None:
            self.state.system.mass = self.state.mass

    def _cmd_velocity(self, args: list[str]) -> None:
        if len(args) < 4 or args[0] != "all" or args[1] != "create":
            raise MDInputError("expected `velocity all create TEMP SEED loop geom`")
        options = dict(zip(args[4::2], args[5::2]))
        if len(args[4:]) % 2:
            raise MDInputError("velocity keywords come in pairs")
        unknown = set(options) - {"loop", "dist", "mom", "rot"}
        if unknown:
            raise MDInputError(f"velocity keyword(s) {sorted(unknown)} are not supported")
        if options.get("loop") != "geom":
            raise MDInputError("only `loop geom` is supported (the generator that gives the same velocities "
                               "on any number of processes)")
        self._only(options.get("dist", "uniform"), ("uniform",), "velocity dist")
        self._only(options.get("rot", "no"), ("no",), "velocity rot")
        momentum = self._only(options.get("mom", "yes"), ("yes", "no"), "velocity mom") == "yes"
        if self.state.system is None:
            raise MDInputError("velocity needs atoms: `create_atoms` first")
        if self.state.mass is None:
            raise MDInputError("velocity needs the atoms' mass: `mass 1 VALUE` first")
        self.state.system.create_velocities(float(args[2]), int(args[3]), zero_momentum=momentum)

    def _cmd_pair_style(self, args: list[str]) -> None:
        self._expect(args, 2, "pair_style lj/cut CUTOFF")
        self._only(args[0], ("lj/cut",), "pair_style")
        self.state.pair_cutoff = float(args[1])

    def _cmd_pair_coeff(self, args: list[str]) -> None:
        if len(args) not in (4, 5) or args[0] not in ("1", "*") or args[1] not in ("1", "*"):
            raise MDInputError("expected `pair_coeff 1 1 EPSILON SIGMA [CUTOFF]`")
        if self.state.pair_cutoff is None:
            raise MDInputError("pair_coeff needs `pair_style lj/cut CUTOFF` first")
        cutoff = float(args[4]) if len(args) == 5 else self.state.pair_cutoff
        self.state.pair = LJCut(float(args[2]), float(args[3]), cutoff, self.state.shift)

    def _cmd_pair_modify(self, args: list[str]) -> None:
        if len(args) != 2 or args[0] != "shift":
            raise MDInputError("expected `pair_modify shift yes|no`")
        self.state.shift = self._only(args[1], ("yes", "no"), "pair_modify shift") == "yes"
        if self.state.pair is not None:
            p = self.state.pair
            self.state.pair = LJCut(p.epsilon, p.sigma, p.cutoff, self.state.shift)

    def _cmd_neighbor(self, args: list[str]) -> None:
        self._expect(args, 2, "neighbor SKIN bin")
        self._only(args[1], ("bin",), "neighbor style")
        self.state.skin = float(args[0])

    def _cmd_neigh_modify(self, args: list[str]) -> None:
        if not args or len(args) % 2:
            raise MDInputError("expected `neigh_modify delay D every E check yes|no`")
        for key, value in zip(args[0::2], args[1::2]):
            if key == "delay":
                self.state.delay = int(value)
            elif key == "every":
                self.state.every = int(value)
            elif key == "check":
                self.state.check = self._only(value, ("yes", "no"), "neigh_modify check") == "yes"
            else:
                raise MDInputError(f"neigh_modify keyword {key!r} is not supported (delay, every, check)")

    def _cmd_fix(self, args: list[str]) -> None:
        if len(args) != 3 or args[1] != "all" or args[2] != "nve":
            raise MDInputError("only `fix ID all nve` is supported")
        self.state.integrator = True

    def _cmd_timestep(self, args: list[str]) -> None:
        self._expect(args, 1, "timestep DT")
        self.state.dt = float(args[0])

    def _cmd_thermo(self, args: list[str]) -> None:
        self._expect(args, 1, "thermo N")
        self.state.thermo_every = int(args[0])

    def _cmd_run(self, args: list[str]) -> None:
        self._expect(args, 1, "run N")
        s = self.state
        if s.system is None or s.system.atoms == 0:
            raise MDInputError("run needs atoms: `create_box` and `create_atoms` first")
        if s.pair is None:
            raise MDInputError("run needs `pair_style lj/cut` and `pair_coeff`")
        if not s.integrator:
            raise MDInputError("run needs `fix ID all nve` (the only integrator supported)")
        if s.mass is None:
            raise MDInputError("run needs the atoms' mass: `mass 1 VALUE`")
        neighbor = NeighborSettings(s.skin, s.delay, s.every, s.check)
        sim = s.simulation
        if sim is None or (sim.pair, sim.neighbor, sim.dt, sim.system.mass) != (s.pair, neighbor, s.dt, s.mass):
            system = s.system
            if sim is not None:  # carry the state of the last run over
                system = System(system.box, sim.positions(), system.mass, sim.velocities())
            if self.ranks == 1:
                s.simulation = sim = Simulation(system, s.pair, neighbor, s.dt, self.threads)
            else:
                s.simulation = sim = DecomposedSimulation(system, s.pair, neighbor, s.dt, self.threads,
                                                          ranks=self.ranks, rank=self.rank)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DangerousBuildWarning)
            s.runs.append(sim.run(int(args[0]), s.thermo_every, self.out, self.timing))
        for warning in caught:
            self.out(f"WARNING: {warning.message}")

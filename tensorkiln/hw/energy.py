"""Energy from access counts and a per-access cost table.

The default table is the normalized energy of Eyeriss (Chen, Emer, Sze,
"Eyeriss: A Spatial Architecture for Energy-Efficient Dataflow for
Convolutional Neural Networks", ISCA 2016, Fig. 1 / Table IV), also used by
Accelergy's tutorials: relative to one MAC in the ALU,

    register file (in the PE)   1x
    inter-PE (array network)    2x
    global buffer (SRAM)        6x
    DRAM                      200x

Give your own numbers (e.g. picojoules from Accelergy or CACTI for your node)
by passing another ``EnergyTable``; the unit travels with the table.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# What one MAC costs besides the multiply-add itself, in a systolic PE:
# register reads of the two operands and the partial-sum update ...
REGISTER_ACCESSES_PER_MAC = 3
# ... and two hops to a neighbour: the moving operand travels on, and so does the
# partial sum (ws, is) or the second moving operand (os).
INTER_PE_HOPS_PER_MAC = 2


@dataclass(frozen=True)
class EnergyTable:
    """Cost of one access of each kind, in ``unit``."""

    mac: float = 1.0
    register: float = 1.0
    inter_pe: float = 2.0
    sram: float = 6.0
    dram: float = 200.0
    unit: str = "MAC"
    source: str = "Eyeriss, Chen et al. ISCA 2016 (normalized to one MAC)"


@dataclass(frozen=True)
class EnergyBreakdown:
    """Energy of one layer by component, in the table's unit."""

    mac: float
    register: float
    inter_pe: float
    sram: float
    dram: float
    unit: str

    @property
    def total(self) -> float:
        """Sum of all components."""
        return self.mac + self.register + self.inter_pe + self.sram + self.dram

    def scaled(self, factor: float) -> "EnergyBreakdown":
        """This breakdown times ``factor`` (e.g. the number of groups of a layer)."""
        return EnergyBreakdown(*(getattr(self, f.name) * factor for f in fields(self)
                                 if f.name != "unit"), unit=self.unit)

    def __add__(self, other: "EnergyBreakdown") -> "EnergyBreakdown":
        return EnergyBreakdown(*(getattr(self, f.name) + getattr(other, f.name)
                                 for f in fields(self) if f.name != "unit"), unit=self.unit)


def energy_of(macs: int, sram_accesses: int, dram_accesses: int,
              table: EnergyTable) -> EnergyBreakdown:
    """Energy of ``macs`` MACs with the given SRAM and DRAM word accesses."""
    return EnergyBreakdown(
        mac=macs * table.mac,
        register=REGISTER_ACCESSES_PER_MAC * macs * table.register,
        inter_pe=INTER_PE_HOPS_PER_MAC * macs * table.inter_pe,
        sram=sram_accesses * table.sram,
        dram=dram_accesses * table.dram,
        unit=table.unit)


def zero_energy(unit: str = "MAC") -> EnergyBreakdown:
    """An all-zero breakdown, the start of a sum."""
    return EnergyBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, unit=unit)

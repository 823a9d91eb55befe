"""Number formats of the modelled array: bytes per operand and energy per MAC and per access.

A precision changes three things in the model, and only those:

- the width of a word: SRAMs of the same KiB hold 4x more int8 operands than
  fp32 ones (fewer folds and DRAM refills), and DRAM moves 4x fewer bytes;
- the energy of one multiply-add, from Horowitz, "Computing's energy problem
  (and what we can do about it)", ISSCC 2014, Fig. 1.1.9 (45 nm, 0.9 V):

      int8 multiply 0.2 pJ + int32 accumulate 0.1 pJ          = 0.3 pJ
      bf16 multiply <= 1.1 pJ (fp16's; bf16's 8-bit mantissa
           needs a smaller multiplier) + fp32 accumulate 0.9 pJ = 2.0 pJ
      fp32 multiply 3.7 pJ + fp32 accumulate 0.9 pJ           = 4.6 pJ

- the energy of moving a word, which grows with its bytes: the Eyeriss ratios
  of the default table (register 1x, inter-PE 2x, SRAM 6x, DRAM 200x a
  16-bit MAC) anchored to a 16-bit MAC of 1.5 pJ (Horowitz: fp16 multiply 1.1
  + add 0.4) per 2 bytes, i.e. 0.75 pJ per byte for a register access.

Partial sums are kept at the accumulator's width (int32 or fp32) inside the
PEs; words that leave the array (the output feature map) are written back at
the operand width, as TPU v1 requantizes its int32 sums to 8 bits.
"""
from __future__ import annotations

from dataclasses import dataclass

from .energy import EnergyTable
from .errors import AccelConfigError

# Eyeriss's access costs relative to one 16-bit MAC, and that MAC's energy in picojoules.
EYERISS_RELATIVE = {"register": 1.0, "inter_pe": 2.0, "sram": 6.0, "dram": 200.0}
PJ_PER_16BIT_MAC = 1.5
SOURCE = "Horowitz ISSCC 2014 (45 nm) MACs; Eyeriss access ratios at 0.75 pJ/byte"


@dataclass(frozen=True)
class Precision:
    """One number format: operand bytes, accumulator, energy of one MAC in pJ."""

    name: str
    operand_bytes: int
    accumulator: str
    mac_pj: float

    def energy_table(self) -> EnergyTable:
        """Picojoules per MAC and per access of a word of this precision."""
        per_access = {kind: ratio * PJ_PER_16BIT_MAC / 2 * self.operand_bytes
                      for kind, ratio in EYERISS_RELATIVE.items()}
        return EnergyTable(mac=self.mac_pj, unit="pJ", source=f"{self.name}: {SOURCE}", **per_access)


PRECISIONS = {
    "int8": Precision("int8", 1, "int32", 0.2 + 0.1),
    "bf16": Precision("bf16", 2, "fp32", 1.1 + 0.9),
    "fp32": Precision("fp32", 4, "fp32", 3.7 + 0.9),
}


def precision(name: str) -> Precision:
    """The Precision called `name` ("int8", "bf16" or "fp32")."""
    if name not in PRECISIONS:
        raise AccelConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return PRECISIONS[name]

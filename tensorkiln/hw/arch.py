"""The accelerator being modelled: array shape, dataflow, SRAMs, DRAM link, clock.

Presets describe well-known machines. Their numbers come from the papers cited
beside them; where a paper leaves a choice open (how to split one unified
buffer between the three operands) the choice is written down here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import AccelConfigError
from .precision import precision as precision_named

DATAFLOWS = ("ws", "os", "is")
DATAFLOW_NAMES = {"ws": "weight stationary", "os": "output stationary", "is": "input stationary"}


@dataclass(frozen=True)
class ArrayConfig:
    """An R x C systolic array with three double-buffered SRAMs and a DRAM link.

    SRAM sizes are in KiB (1024 bytes), as in SCALE-Sim. ``dram_words_per_cycle``
    of None means the link is not a limit (SCALE-Sim's CALC mode): the model then
    reports the bandwidth the layer *needs* instead of stalls.
    """

    rows: int = 32
    cols: int = 32
    dataflow: str = "ws"
    ifmap_sram_kb: float = 64
    filter_sram_kb: float = 64
    ofmap_sram_kb: float = 64
    word_bytes: int = 1
    dram_words_per_cycle: float | None = None
    clock_mhz: float | None = None
    name: str = "array"
    precision: str | None = None  # a name in hw/precision.py; its operand bytes are word_bytes

    def __post_init__(self) -> None:
        for field in ("rows", "cols", "word_bytes"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise AccelConfigError(f"array {field} must be a positive integer, got {value!r}")
        for field in ("ifmap_sram_kb", "filter_sram_kb", "ofmap_sram_kb"):
            if not getattr(self, field) > 0:
                raise AccelConfigError(f"{field} must be positive, got {getattr(self, field)!r}")
        if self.dataflow not in DATAFLOWS:
            raise AccelConfigError(
                f"dataflow must be one of {', '.join(DATAFLOWS)}, got {self.dataflow!r}")
        if self.precision is not None:
            from_table = precision_named(self.precision).operand_bytes
            if self.word_bytes != from_table:
                raise AccelConfigError(f"precision {self.precision} has {from_table}-byte operands, "
                                       f"but word_bytes is {self.word_bytes}")
        if self.dram_words_per_cycle is not None and not self.dram_words_per_cycle > 0:
            raise AccelConfigError(
                f"DRAM bandwidth must be positive, got {self.dram_words_per_cycle!r}")

    @property
    def pes(self) -> int:
        """Number of MAC units (peak MACs per cycle)."""
        return self.rows * self.cols

    def sram_words(self, operand: str) -> int:
        """Capacity of one operand's SRAM ("ifmap", "filter" or "ofmap") in words."""
        kb = {"ifmap": self.ifmap_sram_kb, "filter": self.filter_sram_kb,
              "ofmap": self.ofmap_sram_kb}[operand]
        return int(kb * 1024) // self.word_bytes

    def with_(self, **changes) -> "ArrayConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)


def _gbps_to_words_per_cycle(gb_per_s: float, clock_mhz: float, word_bytes: int) -> float:
    return gb_per_s * 1e9 / (clock_mhz * 1e6) / word_bytes


# TPU v1 (Jouppi et al., ISCA 2017): 256x256 8-bit MACs at 700 MHz, a 24 MiB unified
# buffer for activations, 34 GB/s DDR3 for weights, and a weight FIFO four 64 KiB tiles
# deep. We give the unified buffer half to inputs and half to outputs, and the FIFO
# (256 KiB) to the filter SRAM. Weight stationary, as the TPU is.
TPU_V1 = ArrayConfig(rows=256, cols=256, dataflow="ws", ifmap_sram_kb=12 * 1024,
                     filter_sram_kb=256, ofmap_sram_kb=12 * 1024, word_bytes=1,
                     dram_words_per_cycle=_gbps_to_words_per_cycle(34, 700, 1),
                     clock_mhz=700, name="tpu-v1")

# Eyeriss (Chen et al., ISCA 2016 / JSSC 2017): 12x14 PEs, a 108 KB global buffer,
# 16-bit words, 200 MHz. SCALE-Sim's own eyeriss.cfg splits the buffer 36/36/36 KB and
# uses 10 words/cycle of DRAM bandwidth; we do the same. Eyeriss is row stationary,
# which a systolic model does not have; weight stationary is the nearest of the three.
EYERISS = ArrayConfig(rows=12, cols=14, dataflow="ws", ifmap_sram_kb=36, filter_sram_kb=36,
                      ofmap_sram_kb=36, word_bytes=2, dram_words_per_cycle=10.0,
                      clock_mhz=200, name="eyeriss")

# SCALE-Sim's example configuration (configs/scale.cfg): 32x32, 64 KiB per operand.
SCALESIM_32 = ArrayConfig(rows=32, cols=32, dataflow="ws", ifmap_sram_kb=64, filter_sram_kb=64,
                          ofmap_sram_kb=64, word_bytes=1, name="scalesim-32x32")

PRESETS: dict[str, ArrayConfig] = {c.name: c for c in (TPU_V1, EYERISS, SCALESIM_32)}


def preset(name: str) -> ArrayConfig:
    """The preset called ``name`` ("tpu-v1", "eyeriss", "scalesim-32x32")."""
    key = name.lower().replace("_", "-")
    if key not in PRESETS:
        raise AccelConfigError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[key]


def parse_array_shape(text: str) -> tuple[int, int]:
    """Parse '32x32' (rows x cols) into (32, 32)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        rows, cols = (int(p) for p in parts)
    except ValueError:
        raise AccelConfigError(f"array shape must look like 32x32 (rows x cols), got {text!r}")
    if rows <= 0 or cols <= 0:
        raise AccelConfigError(f"array shape must be positive, got {text!r}")
    return rows, cols

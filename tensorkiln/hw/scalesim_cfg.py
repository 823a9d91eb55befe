"""SCALE-Sim 3.0 architecture files (.cfg): read, validate, write.

A .cfg is an INI file. SCALE-Sim 3.0 reads (section: keys):

    general:               run_name
    architecture_presets:  ArrayHeight, ArrayWidth, IfmapSramSzkB, FilterSramSzkB,
                           OfmapSramSzkB, IfmapOffset, FilterOffset, OfmapOffset,
                           Dataflow, Bandwidth (only in USER mode),
                           ReadRequestBuffer, WriteRequestBuffer
    layout:                IfmapCustomLayout, FilterCustomLayout, IfmapSRAMBank*,
                           FilterSRAMBank*  (address layouts; they do not change
                           the stall-free cycle counts this model gives)
    sparsity:              SparsitySupport (+ SparseRep, OptimizedMapping, ...)
    run_presets:           InterfaceBandwidth (CALC or USER), UseRamulatorTrace
    network_presets:       TopologyCsvLoc (optional; SCALE-Sim 3.0 actually looks
                           for it in [architecture_presets], so we accept both)

SCALE-Sim itself fails with a Python traceback on a missing section; we only
require what the model needs (array shape, SRAM sizes, dataflow) and fill the
rest with SCALE-Sim's defaults. Errors name the file, line and key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .arch import DATAFLOWS, ArrayConfig
from .errors import AccelConfigError

# SCALE-Sim 3.0's layout section, with the values of its shipped configs; we write
# them back so SCALE-Sim can read the files we produce.
_DEFAULT_LAYOUT = (
    ("IfmapCustomLayout", "False"), ("FilterCustomLayout", "False"),
    ("IfmapSRAMBankBandwidth", "10"), ("IfmapSRAMBankNum", "10"), ("IfmapSRAMBankPort", "2"),
    ("FilterSRAMBankBandwidth", "10"), ("FilterSRAMBankNum", "10"), ("FilterSRAMBankPort", "2"),
)


@dataclass(frozen=True)
class ScaleSimConfig:
    """Everything a SCALE-Sim 3.0 .cfg says, in Python types."""

    run_name: str = "scale_run"
    array_rows: int = 32
    array_cols: int = 32
    ifmap_sram_kb: int = 64
    filter_sram_kb: int = 64
    ofmap_sram_kb: int = 64
    ifmap_offset: int = 0
    filter_offset: int = 10_000_000
    ofmap_offset: int = 20_000_000
    dataflow: str = "ws"
    bandwidth_mode: str = "CALC"          # CALC: estimate the bandwidth; USER: use `bandwidths`
    bandwidths: tuple[int, ...] = ()
    read_request_buffer: int = 512
    write_request_buffer: int = 512
    use_ramulator_trace: bool = False
    topology_path: str | None = None
    layout: tuple[tuple[str, str], ...] = field(default=_DEFAULT_LAYOUT)

    def to_array(self, word_bytes: int = 1) -> ArrayConfig:
        """The array this configuration describes (SCALE-Sim words are 1 byte)."""
        bw = float(self.bandwidths[0]) if self.bandwidth_mode == "USER" and self.bandwidths \
            else None
        return ArrayConfig(rows=self.array_rows, cols=self.array_cols, dataflow=self.dataflow,
                           ifmap_sram_kb=self.ifmap_sram_kb, filter_sram_kb=self.filter_sram_kb,
                           ofmap_sram_kb=self.ofmap_sram_kb, word_bytes=word_bytes,
                           dram_words_per_cycle=bw, name=self.run_name)

    @staticmethod
    def from_array(array: ArrayConfig, run_name: str | None = None) -> "ScaleSimConfig":
        """A SCALE-Sim configuration for ``array`` (SRAM sizes rounded up to whole KiB)."""
        bw = array.dram_words_per_cycle
        return ScaleSimConfig(
            run_name=run_name or array.name, array_rows=array.rows, array_cols=array.cols,
            ifmap_sram_kb=_whole_kb(array.ifmap_sram_kb * array.word_bytes),
            filter_sram_kb=_whole_kb(array.filter_sram_kb * array.word_bytes),
            ofmap_sram_kb=_whole_kb(array.ofmap_sram_kb * array.word_bytes),
            dataflow=array.dataflow, bandwidth_mode="CALC" if bw is None else "USER",
            bandwidths=() if bw is None else (max(1, round(bw)),))


def _whole_kb(kb: float) -> int:
    return max(1, int(-(-kb // 1)))


def _parse_ini(path: Path) -> dict[str, dict[str, tuple[str, int]]]:
    """Sections -> lower-cased keys -> (value, line number). Comments: '#' or ';'."""
    sections: dict[str, dict[str, tuple[str, int]]] = {}
    current: dict[str, tuple[str, int]] | None = None
    try:
        text = path.read_text()
    except OSError as err:
        raise AccelConfigError(f"cannot read configuration: {err.strerror}", path=str(path))
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise AccelConfigError(f"malformed section header {line!r}", str(path), lineno)
            current = sections.setdefault(line[1:-1].strip(), {})
            continue
        cut = [i for i in (line.find(":"), line.find("=")) if i >= 0]
        if not cut:
            raise AccelConfigError(f"expected 'key: value' or 'key = value', got {line!r}",
                                   str(path), lineno)
        if current is None:
            raise AccelConfigError(f"key outside any [section]: {line!r}", str(path), lineno)
        key, value = line[:min(cut)].strip(), line[min(cut) + 1:].strip()
        current[key.lower()] = (value, lineno)
    return sections


def read_config(path: str | Path) -> ScaleSimConfig:
    """Read a SCALE-Sim 3.0 .cfg file; AccelConfigError names file, line and key on bad input."""
    path = Path(path)
    ini = _parse_ini(path)
    where = str(path)

    def get(section: str, key: str, required: bool = False) -> tuple[str, int] | None:
        entry = ini.get(section, {}).get(key.lower())
        if entry is None and required:
            raise AccelConfigError(f"missing required key in section [{section}]", where,
                                   None, key)
        return entry

    def integer(section: str, key: str, default: int, positive: bool = True,
                required: bool = False) -> int:
        entry = get(section, key, required)
        if entry is None:
            return default
        value, lineno = entry
        try:
            number = int(value)
        except ValueError:
            raise AccelConfigError(f"expected an integer, got {value!r}", where, lineno, key)
        if positive and number <= 0:
            raise AccelConfigError(f"must be positive, got {number}", where, lineno, key)
        if not positive and number < 0:
            raise AccelConfigError(f"must not be negative, got {number}", where, lineno, key)
        return number

    arch = "architecture_presets"
    if arch not in ini:
        raise AccelConfigError(f"missing section [{arch}]", where)
    df_entry = get(arch, "Dataflow", required=True)
    assert df_entry is not None
    dataflow = df_entry[0].lower()
    if dataflow not in DATAFLOWS:
        raise AccelConfigError(f"expected one of {', '.join(DATAFLOWS)}, got {df_entry[0]!r}",
                               where, df_entry[1], "Dataflow")

    mode_entry = get("run_presets", "InterfaceBandwidth")
    mode = (mode_entry[0] if mode_entry else "CALC").upper()
    if mode not in ("CALC", "USER"):
        assert mode_entry is not None
        raise AccelConfigError(f"expected CALC or USER, got {mode_entry[0]!r}", where,
                               mode_entry[1], "InterfaceBandwidth")
    bandwidths: tuple[int, ...] = ()
    bw_entry = get(arch, "Bandwidth")
    if mode == "USER":
        if bw_entry is None:
            raise AccelConfigError("InterfaceBandwidth is USER but no Bandwidth is given",
                                   where, mode_entry[1] if mode_entry else None, "Bandwidth")
        try:
            bandwidths = tuple(int(x) for x in bw_entry[0].split(",") if x.strip())
        except ValueError:
            raise AccelConfigError(f"expected comma-separated integers, got {bw_entry[0]!r}",
                                   where, bw_entry[1], "Bandwidth")
        if not bandwidths or min(bandwidths) <= 0:
            raise AccelConfigError(f"expected positive words/cycle, got {bw_entry[0]!r}",
                                   where, bw_entry[1], "Bandwidth")

    sparse = get("sparsity", "SparsitySupport")
    if sparse is not None and sparse[0].lower() == "true":
        raise AccelConfigError("sparsity is not modelled by tensorkiln; set it to false",
                               where, sparse[1], "SparsitySupport")

    topo = get("network_presets", "TopologyCsvLoc") or get(arch, "TopologyCsvLoc")
    ramulator = get("run_presets", "UseRamulatorTrace")
    run_name = get("general", "run_name")
    layout = tuple((key, (get("layout", key) or (default, 0))[0])
                   for key, default in _DEFAULT_LAYOUT)
    return ScaleSimConfig(
        run_name=run_name[0] if run_name else "scale_run",
        array_rows=integer(arch, "ArrayHeight", 0, required=True),
        array_cols=integer(arch, "ArrayWidth", 0, required=True),
        ifmap_sram_kb=integer(arch, "IfmapSramSzkB", 0, required=True),
        filter_sram_kb=integer(arch, "FilterSramSzkB", 0, required=True),
        ofmap_sram_kb=integer(arch, "OfmapSramSzkB", 0, required=True),
        ifmap_offset=integer(arch, "IfmapOffset", 0, positive=False),
        filter_offset=integer(arch, "FilterOffset", 10_000_000, positive=False),
        ofmap_offset=integer(arch, "OfmapOffset", 20_000_000, positive=False),
        dataflow=dataflow, bandwidth_mode=mode, bandwidths=bandwidths,
        read_request_buffer=integer(arch, "ReadRequestBuffer", 512),
        write_request_buffer=integer(arch, "WriteRequestBuffer", 512),
        use_ramulator_trace=bool(ramulator and ramulator[0].lower() == "true"),
        topology_path=topo[0].strip().strip('"') if topo else None,
        layout=layout)


def write_config(config: ScaleSimConfig, path: str | Path) -> None:
    """Write ``config`` as a .cfg that SCALE-Sim 3.0 (and ``read_config``) can read."""
    bw = ",".join(str(b) for b in config.bandwidths) or "10"
    lines = [
        "[general]", f"run_name = {config.run_name}", "",
        "[architecture_presets]",
        f"ArrayHeight:    {config.array_rows}",
        f"ArrayWidth:     {config.array_cols}",
        f"IfmapSramSzkB:    {config.ifmap_sram_kb}",
        f"FilterSramSzkB:   {config.filter_sram_kb}",
        f"OfmapSramSzkB:    {config.ofmap_sram_kb}",
        f"IfmapOffset:    {config.ifmap_offset}",
        f"FilterOffset:   {config.filter_offset}",
        f"OfmapOffset:    {config.ofmap_offset}",
        f"Bandwidth : {bw}",
        f"Dataflow : {config.dataflow}",
        "MemoryBanks:   1",
        f"ReadRequestBuffer: {config.read_request_buffer}",
        f"WriteRequestBuffer: {config.write_request_buffer}", "",
        "[layout]", *(f"{k}: {v}" for k, v in config.layout), "",
        "[sparsity]", "SparsitySupport : false", "SparseRep : ellpack_block",
        "OptimizedMapping : false", "BlockSize : 8", "RandomNumberGeneratorSeed : 40", "",
        "[run_presets]", f"InterfaceBandwidth: {config.bandwidth_mode}",
        f"UseRamulatorTrace: {config.use_ramulator_trace}", "",
    ]
    # No [network_presets]: SCALE-Sim 3.0 would then look for TopologyCsvLoc in
    # [architecture_presets] (a bug in its reader) and fail; pass the topology with -t.
    Path(path).write_text("\n".join(lines))

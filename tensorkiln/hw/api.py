"""``simulate``: the one-call Python entry point of the accelerator model."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from ..frontend.jit import JitFunction, jit
from .arch import SCALESIM_32, ArrayConfig, parse_array_shape, preset as get_preset
from .energy import EnergyTable
from .errors import AccelConfigError
from .graph_layers import layers_from_graph
from .dram import _slice_footprint
from .layer import Layer, touched_positions
from .model import best_dataflow, simulate_layer
from .precision import precision as precision_named
from .report import SimReport
from .topology import read_topology


def as_layers(workload: Any) -> list[Layer]:
    """Layers from a Layer, a list of Layers, a topology .csv path, or a graph."""
    if isinstance(workload, Layer):
        return [workload]
    if isinstance(workload, (str, Path)):
        return read_topology(workload)
    if hasattr(workload, "nodes"):
        return layers_from_graph(workload)
    layers = list(workload)
    for item in layers:
        if not isinstance(item, Layer):
            raise AccelConfigError(f"expected Layer objects, got {type(item).__name__}")
    return layers


def make_array(array: tuple[int, int] | str | ArrayConfig | None = None,
               dataflow: str | None = None,
               sram_kb: tuple[float, float, float] | None = None,
               preset: str | ArrayConfig | None = None,
               dram_words_per_cycle: float | None = None,
               word_bytes: int | None = None,
               precision: str | None = None) -> ArrayConfig:
    """An ArrayConfig: start from ``preset`` (default SCALE-Sim's 32x32) and apply overrides.

    ``precision`` ("int8", "bf16", "fp32") sets the word width; the DRAM link keeps its bytes per
    cycle (a preset's words per cycle are converted), unless ``dram_words_per_cycle`` is given, which
    then counts words of that precision."""
    if isinstance(array, ArrayConfig):
        base = array
    elif isinstance(preset, ArrayConfig):
        base = preset
    elif preset is not None:
        base = get_preset(preset)
    else:
        base = SCALESIM_32
    changes: dict[str, Any] = {}
    if array is not None and not isinstance(array, ArrayConfig):
        rows, cols = parse_array_shape(array) if isinstance(array, str) else array
        changes.update(rows=int(rows), cols=int(cols))
    if dataflow is not None and dataflow != "best":
        changes["dataflow"] = dataflow
    if sram_kb is not None:
        if len(sram_kb) != 3:
            raise AccelConfigError(f"sram_kb must be (ifmap, filter, ofmap) KiB, got {sram_kb!r}")
        changes.update(ifmap_sram_kb=sram_kb[0], filter_sram_kb=sram_kb[1],
                       ofmap_sram_kb=sram_kb[2])
    if dram_words_per_cycle is not None:
        changes["dram_words_per_cycle"] = dram_words_per_cycle
    if word_bytes is not None:
        changes["word_bytes"] = word_bytes
    if precision is not None:
        width = precision_named(precision).operand_bytes
        if word_bytes is not None and word_bytes != width:
            raise AccelConfigError(f"precision {precision} has {width}-byte words, not word_bytes={word_bytes}")
        changes.update(word_bytes=width, precision=precision)
        if dram_words_per_cycle is None and base.dram_words_per_cycle is not None:
            changes["dram_words_per_cycle"] = base.dram_words_per_cycle * base.word_bytes / width
    if changes and "rows" in changes and base.name == SCALESIM_32.name:
        changes["name"] = f"{changes['rows']}x{changes['cols']}"
    return base.with_(**changes) if changes else base


def simulate(workload: Any, array: tuple[int, int] | str | ArrayConfig | None = None,
             dataflow: str | None = None,
             sram_kb: tuple[float, float, float] | None = None,
             preset: str | ArrayConfig | None = None,
             dram_words_per_cycle: float | None = None,
             word_bytes: int | None = None,
             energy: EnergyTable | None = None,
             precision: str | None = None) -> SimReport:
    """Model a workload on a systolic array and return a SimReport.

    ``workload``: Layers, a SCALE-Sim topology path, or a graph. ``array``:
    (rows, cols), "32x32" or an ArrayConfig. ``dataflow``: "ws", "os", "is" or
    "best" (fastest per layer). ``sram_kb``: (ifmap, filter, ofmap) KiB.
    ``preset``: "tpu-v1", "eyeriss", "scalesim-32x32"; explicit arguments
    override it. ``precision``: "int8", "bf16" or "fp32" operands (hw/precision.py):
    the word width and, unless ``energy`` is given, energies in picojoules. Example::

        report = simulate("resnet18.csv", array=(32, 32), dataflow="ws")
        print(report.table()); report.to_csv("out/")
    """
    config = make_array(array, dataflow, sram_kb, preset, dram_words_per_cycle, word_bytes, precision)
    if energy is not None:
        table = energy
    elif config.precision is not None:
        table = precision_named(config.precision).energy_table()
    else:
        table = EnergyTable()
    layers = as_layers(workload)
    if dataflow == "best":
        results = tuple(best_dataflow(layer, config, table) for layer in layers)
    else:
        results = tuple(simulate_layer(layer, config, config.dataflow, table) for layer in layers)
    return SimReport(results=results, array=config, dataflow=dataflow or config.dataflow,
                     energy_table=table)


def simulate_model(model: Any, *example_inputs, **options) -> SimReport:
    """Model a compiled function, module or imported model on a systolic array.

    ``model``: a tk.jit function, a tk.nn Module, a plain function of tensors,
    or a model from ``tk.onnx.load``; ``example_inputs`` fix the shapes. The
    layers are the convolutions and matmuls of the *optimized* graph (batch
    norm folded, ...), which is what the compiler would run. ``options`` are
    ``simulate``'s (array, dataflow, sram_kb, preset, ...). Example::

        report = simulate_model(tk.jit(net), x, array=(32, 32), dataflow="best")
    """
    if not hasattr(model, "optimized_graph"):
        model = model if isinstance(model, JitFunction) else jit(model)
    graph = model.optimized_graph(*example_inputs)
    return simulate(graph, **options)


def clear_caches() -> None:
    """Forget memoized footprints (so a benchmark measures a cold run)."""
    _slice_footprint.cache_clear()
    touched_positions.cache_clear()


def simulate_layers(layers: Iterable[Layer], config: ArrayConfig, dataflow: str | None = None,
                    energy: EnergyTable | None = None) -> SimReport:
    """Like ``simulate`` but with a ready ArrayConfig (used by the CLI and the sweep)."""
    return simulate(list(layers), array=config, dataflow=dataflow, energy=energy)

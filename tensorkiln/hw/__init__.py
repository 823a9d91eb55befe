"""Analytical model of a systolic-array accelerator (TPU-style), compatible with SCALE-Sim.

    from tensorkiln import hw
    report = hw.simulate(hw.read_topology("net.csv"), array=(32, 32), dataflow="ws")
    print(report.table())
    report.to_csv("out/")          # SCALE-Sim's COMPUTE/BANDWIDTH/DETAILED_ACCESS reports

See docs/accelerator.md for the formulas and how they were validated.
"""
from .api import as_layers, make_array, simulate, simulate_model
from .arch import DATAFLOWS, EYERISS, PRESETS, SCALESIM_32, TPU_V1, ArrayConfig, preset
from .dataflow import FoldPlan, plan_folds, sram_traffic, sram_window
from .dram import DramTraffic, dram_traffic
from .energy import EnergyBreakdown, EnergyTable
from .errors import AccelConfigError, AccelLayerError, SramTooSmallError
from .functional_sim import FunctionalResult, run_gemm
from .graph_layers import layers_from_graph
from .layer import Gemm, Layer
from .model import LayerResult, best_dataflow, simulate_layer
from .precision import PRECISIONS, Precision
from .report import SimReport, Totals
from .scalesim_cfg import ScaleSimConfig, read_config, write_config
from .scalesim_reports import read_scalesim_report, write_scalesim_reports
from .sweep import SweepPoint, sweep
from .topology import read_topology, write_topology

__all__ = [
    "AccelConfigError", "AccelLayerError", "ArrayConfig", "DATAFLOWS", "DramTraffic", "EYERISS",
    "EnergyBreakdown", "EnergyTable", "FoldPlan", "FunctionalResult", "Gemm", "Layer",
    "LayerResult", "PRECISIONS", "PRESETS", "Precision", "SCALESIM_32", "ScaleSimConfig", "SimReport", "SramTooSmallError",
    "SweepPoint", "TPU_V1", "Totals", "as_layers", "best_dataflow", "dram_traffic",
    "layers_from_graph", "make_array", "plan_folds", "preset", "read_config",
    "read_scalesim_report", "read_topology", "run_gemm", "simulate", "simulate_layer", "simulate_model",
    "sram_traffic", "sram_window", "sweep", "write_config", "write_scalesim_reports",
    "write_topology",
]

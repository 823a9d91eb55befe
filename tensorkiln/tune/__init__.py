"""The auto-tuner: search spaces of the kernel templates, search strategies, a learned cost model,
measurement in subprocesses, and tuning records that later compiles use (docs/tuning.md)."""
from .api import KernelTuning, TuneResult, kernel_workloads, tune
from .tuner import WorkloadResult, tune_workload

__all__ = ["KernelTuning", "TuneResult", "WorkloadResult", "kernel_workloads", "tune", "tune_workload"]

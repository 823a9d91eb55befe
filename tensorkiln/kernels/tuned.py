"""The one question a kernel template asks the tuner: "the configuration for this workload".

A template computes its analytic choice (cache formulas, rules) and hands it to
`configured(workload, analytic, legal)`, which returns the tuned record's
configuration when one exists for this workload on this machine and is legal
for the template, else the analytic one. Nothing else in a template knows
that records exist.

A workload key is the template's name and the facts that decide its code
(`workload_key("gemm", dtype="float32", m=1024, ...)` ->
`gemm:dtype=float32:m=1024:...`); a target key names the machine the records
were measured on (CPU model, vector width, register count, cache sizes,
threads, OpenMP's wait policy: `target_key`). Records (runtime/tuning_records.py) whose target is
another machine's (or the same machine's under other threads or another wait policy) are ignored, and `records_note` says so for explain().

The best record of a workload is the fastest one that beat the default it was
measured against (the default wins ties). The table of best records is read
again whenever the records file changes, so `tk.tune` in this process is seen
by the next compile; `tuning_digest` is part of the compiled-graph cache key,
so a tuned and an untuned build never share an entry.

`using_configs(table)` replaces the records file for the compiles inside it
(the tuner's measurements: the default under `{}`, a candidate under
`{workload: config}`); `tuning_log()` collects every answer given inside it
(the lowering writes them into each kernel's comment, where explain() and
profile() read them).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from ..shapes.symint import is_symbolic
from ..runtime import tuning_records
from .schedule_defaults import thread_count
from .target import cpu_model_name, cpu_target

T = TypeVar("T")
COMMENT_PREFIX = "tuning: "  # a kernel comment line naming a workload and the configuration it got


@dataclass(frozen=True)
class TunedUse:
    """One answer of `configured`: the workload, the configuration given and where it came from."""

    workload: str
    config: dict
    source: str  # "default", "tuned" or "default (...why a record was not used)"

    def comment_line(self) -> str:
        knobs = " ".join(f"{k}={v}" for k, v in self.config.items())
        return f"{COMMENT_PREFIX}{self.workload} {self.source}: {knobs}"


def workload_key(template: str, **facts: object) -> str:
    """`template:name=value:...` in the order given (no spaces: it is one token in comments). A run-time
    size is its symbolic text without spaces (`h=((h-2)//2)+1`)."""
    text = ":".join([template] + [f"{name}={_token(value)}" for name, value in facts.items()])
    if " " in text:
        raise ValueError(f"workload key {text!r} must not contain spaces")
    return text


def _token(value: object) -> str:
    return str(value).replace(" ", "") if is_symbolic(value) else str(value)


def parse_workload(key: str) -> tuple[str, dict[str, str]]:
    """(template, {fact: value as text}) of a workload key."""
    template, *facts = key.split(":")
    return template, dict(fact.split("=", 1) for fact in facts)


def target_key() -> str:
    """The machine a record is valid on: CPU model, what the templates read of it, the threads, and how
    OpenMP's idle threads wait (`omp_wait_policy`)."""
    return f"{cpu_model_name()}|{cpu_target()!r}|threads={thread_count()}|omp_wait={omp_wait_policy()}"


def omp_wait_policy() -> str:
    """OMP_WAIT_POLICY as this process's OpenMP runtime reads it: "active", "passive" or "default".

    Part of the target key because it changes which configuration wins: with passive threads every
    parallel region wakes a sleeping thread (tens of microseconds), so a search under it favours
    configurations with fewer, larger regions, which measured no faster once the threads spin."""
    policy = os.environ.get("OMP_WAIT_POLICY", "").strip().lower()
    return policy if policy in ("active", "passive") else "default"


# ---- the active table: best record per workload on this machine --------------------------------------
_OVERRIDE: contextvars.ContextVar[dict[str, dict] | None] = contextvars.ContextVar("tk_tuning_override",
                                                                                    default=None)
_LOG: contextvars.ContextVar[list[TunedUse] | None] = contextvars.ContextVar("tk_tuning_log", default=None)


@dataclass(frozen=True)
class RecordTable:
    """The best configuration per workload for this target, and how many records were set aside."""

    best: dict[str, dict]
    foreign: int  # records of other machines
    slower: int  # records that did not beat their default
    path: str


@functools.lru_cache(maxsize=4)
def _table_for(state: tuple[str, int, int], target: str) -> RecordTable:
    winners: dict[str, list[tuning_records.TuningRecord]] = {}
    foreign = slower = 0
    for record in tuning_records.read_records(tuning_records.records_path()):
        if record.target != target:
            foreign += 1
        elif record.seconds >= record.default_seconds:
            slower += 1  # the default wins ties; a later verdict withdraws the earlier wins of its config
            winners[record.workload] = [r for r in winners.get(record.workload, []) if r.config != record.config]
        else:
            winners.setdefault(record.workload, []).append(record)
    best = {w: min(rs, key=lambda r: r.seconds) for w, rs in winners.items() if rs}
    return RecordTable({w: r.config for w, r in best.items()}, foreign, slower, state[0])


def record_table() -> RecordTable:
    """The records file's best configurations for this machine (read again when the file changes)."""
    return _table_for(tuning_records.file_state(), target_key())


def active_configs() -> dict[str, dict]:
    """{workload: config} that `configured` answers from now: an override, else the records file."""
    override = _OVERRIDE.get()
    return override if override is not None else record_table().best


@contextlib.contextmanager
def using_configs(table: dict[str, dict]) -> Iterator[None]:
    """Compiles inside use exactly these configurations (`{}`: every template's analytic choice)."""
    token = _OVERRIDE.set({w: dict(c) for w, c in table.items()})
    try:
        yield
    finally:
        _OVERRIDE.reset(token)


@contextlib.contextmanager
def tuning_log() -> Iterator[list[TunedUse]]:
    """Collects the answers `configured` gives inside (each workload once)."""
    log: list[TunedUse] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def tuning_digest() -> str:
    """A digest of the configurations compiles use now (part of the compiled-graph cache key)."""
    table = active_configs()
    if not table:
        return "none"
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()[:16]


# ---- the question ---------------------------------------------------------------------------------
def config_of(value: object) -> dict:
    """A configuration dataclass as a plain {knob: value} dict (what records hold)."""
    return dataclasses.asdict(value)  # type: ignore[call-overload]


def shown_config(value: object) -> dict:
    """The knobs a kernel comment names: all but the `quiet` ones (field metadata) at their neutral
    default, so a knob added to a template leaves the untuned kernels' C as it was."""
    quiet = {f.name: f.default for f in dataclasses.fields(value)  # type: ignore[arg-type]
             if f.metadata.get("quiet")}
    return {k: v for k, v in config_of(value).items() if k not in quiet or v != quiet[k]}


def from_config(cls: type[T], config: dict) -> T | None:
    """`cls` built from a record's config, or None when the knobs do not match its fields."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if set(config) - names:
        return None
    try:
        return cls(**config)
    except (TypeError, ValueError):
        return None


def configured(workload: str, analytic: T, legal: Callable[[T], bool]) -> T:
    """The configuration for this workload: the tuned record's when there is a legal one, else `analytic`."""
    raw = active_configs().get(workload)
    chosen, source = analytic, "default"
    if raw is not None:
        candidate = from_config(type(analytic), {**config_of(analytic), **raw})
        if candidate is not None and legal(candidate):
            chosen, source = candidate, "tuned"
        else:
            source = "default (its tuned record is not a legal configuration here)"
    log = _LOG.get()
    if log is not None and all(use.workload != workload for use in log):
        log.append(TunedUse(workload, shown_config(chosen), source))
    return chosen


def records_note() -> str:
    """What explain() says about the records file: where it is, what was used and what was ignored."""
    table = record_table()
    lines = [f"tuning records: {table.path}: {len(table.best)} tuned workload(s) for this machine"]
    if _OVERRIDE.get() is not None:
        lines.append("  (a tuning measurement is in progress: its configurations replace the file's)")
    if table.foreign:
        lines.append(f"  {table.foreign} record(s) measured on another machine ignored (this one: {target_key()}; "
                     "the key also names the threads and OpenMP's wait policy)")
    if table.slower:
        lines.append(f"  {table.slower} record(s) not faster than their default ignored (the default wins ties)")
    return "\n".join(lines)


__all__ = ["COMMENT_PREFIX", "RecordTable", "TunedUse", "active_configs", "config_of", "configured",
           "from_config", "parse_workload", "record_table", "records_note", "shown_config", "target_key", "omp_wait_policy",
           "tuning_digest",
           "tuning_log", "using_configs", "workload_key"]

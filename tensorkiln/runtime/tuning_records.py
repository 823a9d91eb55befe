"""The tuning records file: append-only JSON lines, each a measured kernel configuration.

One line per finished search of one workload on one machine::

    {"version": 1, "workload": "gemm:float32:m=1024:n=1024:k=1024:panels=0",
     "target": "<CPU model; vector width; caches; threads>", "config": {"mr": 8, "nr": 32, ...},
     "seconds": 0.0101, "default_seconds": 0.0118, "trials": 64, "when": "2026-11-26T04:00:00Z"}

The file is `$TENSORKILN_TUNING_RECORDS`, else `tuning.jsonl` in the cache
root (cache_root.py). Records are only ever appended (one `write` of one
line per record, opened with O_APPEND, so two processes appending at once do
not interleave within a line), never rewritten: the best record of a
workload is chosen when reading.

The file is untrusted input: a line is parsed with `json.loads` and nothing
else, and must have exactly the shape above (bounded strings, a config of
at most 16 small integers or short names, finite positive times); any other
line is skipped with one warning naming its line number. Whether a config
is legal for its kernel is checked again by the template that uses it
(kernels/tuned.py), so a well-formed line can still not ask for a kernel
the search space does not hold.
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .cache_root import configured_root

RECORDS_VERSION = 1
MAX_TEXT = 512  # workload and target strings
MAX_KNOBS = 16
MAX_LINE = 4096


@dataclass(frozen=True)
class TuningRecord:
    """One tuned workload: the best configuration found, its time and the default's, on `target`."""

    workload: str
    target: str
    config: dict = field(hash=False)
    seconds: float
    default_seconds: float
    trials: int
    when: str = ""

    def to_line(self) -> str:
        """The record as one JSON line (no newline inside)."""
        return json.dumps({"version": RECORDS_VERSION, "workload": self.workload, "target": self.target,
                           "config": self.config, "seconds": self.seconds, "default_seconds": self.default_seconds,
                           "trials": self.trials, "when": self.when}, sort_keys=True)


def records_path() -> Path:
    """Where records are read and appended: $TENSORKILN_TUNING_RECORDS, else <cache root>/tuning.jsonl."""
    configured = os.environ.get("TENSORKILN_TUNING_RECORDS")
    return Path(configured).expanduser() if configured else configured_root() / "tuning.jsonl"


def _is_knob_value(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 <= value < 1 << 20
    return isinstance(value, str) and 0 < len(value) <= 16 and value.isidentifier()


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def parse_record(line: str) -> TuningRecord:
    """One line as a TuningRecord; ValueError saying what is wrong with it."""
    if len(line) > MAX_LINE:
        raise ValueError("line too long")
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("version") != RECORDS_VERSION:
        raise ValueError(f"not a version-{RECORDS_VERSION} record")
    expected = {"version", "workload", "target", "config", "seconds", "default_seconds", "trials", "when"}
    if set(data) != expected:
        raise ValueError(f"fields {sorted(set(data) ^ expected)} missing or unknown")
    for name in ("workload", "target", "when"):
        if not isinstance(data[name], str) or len(data[name]) > MAX_TEXT:
            raise ValueError(f"{name} is not a string of at most {MAX_TEXT} characters")
    config = data["config"]
    if not isinstance(config, dict) or not 0 < len(config) <= MAX_KNOBS:
        raise ValueError("config is not a mapping of knobs")
    if not all(isinstance(k, str) and k.isidentifier() and _is_knob_value(v) for k, v in config.items()):
        raise ValueError("config holds a knob that is not a small integer or name")
    if not (_is_time(data["seconds"]) and _is_time(data["default_seconds"])):
        raise ValueError("seconds and default_seconds must be finite positive numbers")
    if isinstance(data["trials"], bool) or not isinstance(data["trials"], int) or data["trials"] < 0:
        raise ValueError("trials is not a count")
    return TuningRecord(data["workload"], data["target"], dict(config), float(data["seconds"]),
                        float(data["default_seconds"]), data["trials"], data["when"])


def read_records(path: Path | None = None) -> list[TuningRecord]:
    """Every well-formed record of the file, in file order ([] when there is no file).

    A malformed line is skipped with a warning naming the file and line."""
    path = path or records_path()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    except OSError as err:
        warnings.warn(f"tensorkiln: tuning records {path} cannot be read ({err}); none used", stacklevel=2)
        return []
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(parse_record(line))
        except (ValueError, RecursionError) as err:  # json.JSONDecodeError is a ValueError
            warnings.warn(f"tensorkiln: {path}:{number}: tuning record skipped ({err})", stacklevel=2)
    return records


def append_record(record: TuningRecord, path: Path | None = None) -> Path:
    """Append one record as one line (the file and its directory are created when missing)."""
    path = path or records_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not record.when:
        record = TuningRecord(record.workload, record.target, record.config, record.seconds,
                              record.default_seconds, record.trials, time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                    time.gmtime()))
    data = (record.to_line() + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return path


def file_state(path: Path | None = None) -> tuple[str, int, int]:
    """(path, size, mtime in ns) of the records file, so readers can tell when it changed."""
    path = path or records_path()
    try:
        info = path.stat()
    except OSError:
        return (str(path), -1, 0)
    return (str(path), info.st_size, info.st_mtime_ns)


__all__ = ["TuningRecord", "append_record", "file_state", "parse_record", "read_records", "records_path"]

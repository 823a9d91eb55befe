"""Errors raised by the accelerator model.

They live here rather than in ``tensorkiln/errors.py`` so that the hardware
model stays self-contained; each one is still a ``ValueError`` so callers that
catch bad input generically keep working.
"""
from __future__ import annotations


class AccelConfigError(ValueError):
    """A malformed architecture .cfg or topology .csv, or an impossible setting.

    When the problem comes from a file, the message names the file, the line
    number and the field, e.g. ``net.csv:4: field 'Strides': expected a
    positive integer, got 'x'``.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.path = path
        self.line = line
        self.field = field
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        what = f"field '{field}': " if field is not None else ""
        super().__init__(f"{where}{what}{message}")


class AccelLayerError(AccelConfigError):
    """A layer that cannot run on the array (zero or negative size, filter larger than input)."""


class SramTooSmallError(AccelConfigError):
    """An SRAM cannot hold the working set of a single fold of a layer."""

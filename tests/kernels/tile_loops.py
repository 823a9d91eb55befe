"""The register-tile loops of a compiled library, read back with objdump (tests of the fused attention)."""
from __future__ import annotations

import re
import subprocess


def tile_loops(library: str) -> list[list[str]]:
    """The innermost loops of `library` that are register tiles: 8 or more FMAs and a broadcast of an
    operand from memory (the exp polynomial's FMAs broadcast only constants)."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True, text=True).stdout
    rows = [(int(m.group(1), 16), m.group(2)) for m in
            (re.match(r"\s+([0-9a-f]+):\s+(.*)", line) for line in text.splitlines()) if m]
    at = {address: i for i, (address, _) in enumerate(rows)}
    loops = []
    for i, (address, instruction) in enumerate(rows):
        jump = re.match(r"j\w+\s+([0-9a-f]+)", instruction)
        if jump and int(jump.group(1), 16) < address and int(jump.group(1), 16) in at:
            loops.append((at[int(jump.group(1), 16)], i))
    tiles = []
    for start, end in loops:
        if any(start <= s and e <= end and (s, e) != (start, end) for s, e in loops):
            continue  # not innermost
        body = [instruction for _, instruction in rows[start:end + 1]]
        if sum("vfmadd" in line for line in body) >= 8 and \
                any("vbroadcastss" in line and "rip" not in line for line in body):
            tiles.append(body)
    return tiles

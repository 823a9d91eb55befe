"""SCALE-Sim topology files (.csv): read and write.

Two formats, told apart by the header line (SCALE-Sim itself needs ``-i gemm``):

    conv:  Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width,
           Channels, Num Filter, Strides,
    gemm:  Layer Name, M, N, K,

Each row ends with a comma in SCALE-Sim's files (it drops the last field of
every row; we accept rows with or without it). A conv row may carry a
sparsity ratio "N:M" (only dense "1:1"-style ratios are accepted) and a
"#comment" field. IFMAP sizes are the *padded* input sizes.

Depthwise layers: SCALE-Sim 3.0 treats a conv row whose name contains "DP" as
``Channels`` separate layers, each with one input channel and ``Num Filter``
filters (named ``<name>Channel_<i>``). We read such a row as one Layer with
``groups = Channels``, ``channels = 1`` - the same work, one table row.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from .errors import AccelConfigError
from .layer import Layer

CONV_HEADER = ("Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width",
               "Channels", "Num Filter", "Strides")
GEMM_HEADER = ("Layer Name", "M", "N", "K")


def is_depthwise_name(name: str) -> bool:
    """SCALE-Sim 3.0's rule: a conv layer is depthwise when its name contains "DP"."""
    return "DP" in name


def _split_row(line: str) -> list[str]:
    fields = [f.strip() for f in line.split(",")]
    # A trailing comma (SCALE-Sim's style) or a '#comment' field carries no data.
    while fields and (fields[-1] == "" or fields[-1].startswith("#")):
        fields.pop()
    return fields


def detect_format(header: str) -> str:
    """"gemm" if a header line names the M, N, K columns, else "conv"."""
    names = [f.lower() for f in _split_row(header)]
    return "gemm" if names[1:4] == ["m", "n", "k"] else "conv"


def read_topology(path: str | Path, fmt: str = "auto") -> list[Layer]:
    """Read a SCALE-Sim topology; AccelConfigError names the file, line and field on bad input.

    ``fmt`` is "conv", "gemm" or "auto" (decide from the header line).
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise AccelConfigError(f"cannot read topology: {err.strerror}", path=str(path))
    if not lines or not lines[0].strip():
        raise AccelConfigError("empty file or missing header line", str(path), 1)
    if fmt == "auto":
        fmt = detect_format(lines[0])
    if fmt not in ("conv", "gemm"):
        raise AccelConfigError(f"topology format must be conv, gemm or auto, got {fmt!r}")
    columns = CONV_HEADER if fmt == "conv" else GEMM_HEADER
    layers: list[Layer] = []
    for lineno, raw in enumerate(lines[1:], start=2):
        fields = _split_row(raw)
        if not fields:
            continue
        layers.append(_parse_row(fields, columns, fmt, str(path), lineno))
    if not layers:
        raise AccelConfigError("no layers in topology", str(path))
    return layers


def _parse_row(fields: list[str], columns: tuple[str, ...], fmt: str, path: str,
               lineno: int) -> Layer:
    if len(fields) < len(columns):
        missing = columns[len(fields)]
        raise AccelConfigError(f"row has {len(fields)} fields, expected {len(columns)} "
                               f"({', '.join(columns)})", path, lineno, missing)
    name = fields[0]
    if not name:
        raise AccelConfigError("empty layer name", path, lineno, columns[0])
    values: list[int] = []
    for text, column in zip(fields[1:len(columns)], columns[1:]):
        try:
            value = int(text)
        except ValueError:
            raise AccelConfigError(f"layer '{name}': expected a positive integer, got {text!r}",
                                   path, lineno, column)
        if value <= 0:
            raise AccelConfigError(f"layer '{name}': must be positive, got {value}", path,
                                   lineno, column)
        values.append(value)
    for extra in fields[len(columns):]:
        ratio = re.fullmatch(r"(\d+)\s*:\s*(\d+)", extra)
        if ratio is None:
            raise AccelConfigError(f"layer '{name}': unexpected extra field {extra!r}", path,
                                   lineno, "Sparsity")
        if ratio.group(1) != ratio.group(2):
            raise AccelConfigError(f"layer '{name}': sparsity {extra} is not modelled; "
                                   f"only dense layers (N:N)", path, lineno, "Sparsity")

    if fmt == "gemm":
        m, n, k = values
        return Layer.gemm(name, m, n, k)
    h, w, fh, fw, c, n, s = values
    if fh > h:
        raise AccelConfigError(f"layer '{name}': filter height {fh} is larger than the ifmap "
                               f"height {h}", path, lineno, "Filter Height")
    if fw > w:
        raise AccelConfigError(f"layer '{name}': filter width {fw} is larger than the ifmap "
                               f"width {w}", path, lineno, "Filter Width")
    if is_depthwise_name(name):
        return Layer(name, h, w, fh, fw, channels=1, num_filters=n, stride_h=s, stride_w=s,
                     groups=c, kind="depthwise")
    return Layer(name, h, w, fh, fw, channels=c, num_filters=n, stride_h=s, stride_w=s)


def scalesim_rows(layers: Iterable[Layer]) -> list[tuple[str, Layer]]:
    """The layers SCALE-Sim runs, one per report row: groups expanded, as SCALE-Sim names them."""
    rows: list[tuple[str, Layer]] = []
    for layer in layers:
        if layer.groups == 1:
            rows.append((layer.name, layer))
        elif layer.kind == "depthwise" and is_depthwise_name(layer.name):
            rows += [(f"{layer.name}Channel_{i}", layer) for i in range(layer.groups)]
        else:
            rows += [(f"{layer.name}_g{i}", layer) for i in range(layer.groups)]
    return rows


def _check_writable(layer: Layer) -> None:
    if layer.batch != 1 and layer.kind != "gemm":
        raise AccelConfigError(f"layer '{layer.name}': SCALE-Sim topologies have no batch "
                               f"size (batch={layer.batch}); write it as a GEMM instead")
    if layer.dilation_h != 1 or layer.dilation_w != 1:
        raise AccelConfigError(f"layer '{layer.name}': SCALE-Sim topologies cannot express "
                               f"dilation {layer.dilation_h}x{layer.dilation_w}")
    if layer.stride_h != layer.stride_w:
        raise AccelConfigError(f"layer '{layer.name}': SCALE-Sim topologies have one stride "
                               f"for both directions, got {layer.stride_h}x{layer.stride_w}")


def write_topology(layers: Iterable[Layer], path: str | Path) -> None:
    """Write layers as a SCALE-Sim topology (GEMM format if every layer is a GEMM).

    Depthwise layers are written as one "DP" row (SCALE-Sim expands it again);
    other grouped layers as one row per group.
    """
    layers = list(layers)
    if layers and all(layer.kind == "gemm" and layer.groups == 1 for layer in layers):
        out = [", ".join(GEMM_HEADER) + ","]
        for layer in layers:
            g = layer.gemm_dims
            out.append(f"{layer.name}, {g.m}, {g.n}, {g.k},")
    else:
        out = [", ".join(CONV_HEADER) + ","]
        for layer in layers:
            _check_writable(layer)
            if layer.kind == "depthwise" and layer.channels == 1:
                name = layer.name if is_depthwise_name(layer.name) else f"DP_{layer.name}"
                rows = [(name, layer.groups)]
            else:
                if is_depthwise_name(layer.name) and (layer.groups > 1 or layer.channels > 1):
                    raise AccelConfigError(f"layer '{layer.name}': SCALE-Sim would read a "
                                           f"layer named with 'DP' as depthwise; rename it")
                rows = [(n, layer.channels) for n, _ in scalesim_rows([layer])]
            for name, channels in rows:
                if "," in name:
                    raise AccelConfigError(f"layer name {name!r} contains a comma")
                out.append(f"{name}, {layer.ifmap_h}, {layer.ifmap_w}, {layer.filter_h}, "
                           f"{layer.filter_w}, {channels}, {layer.num_filters}, "
                           f"{layer.stride_h},")
    Path(path).write_text("\n".join(out) + "\n")

"""`tensorkiln export MODEL.onnx -o OUT/ [--name NAME] [--input NAME=SHAPE ...]`: a standalone C library.

Loads and compiles the ONNX model for the given input shapes (declared shapes
where not given; every dynamic dimension needs a shape) and writes
libNAME.so/.a, NAME.h, example.c, a Makefile and NAME.json into OUT
(tensorkiln/driver/export.py). `make -C OUT run` runs it from C;
`tk.load_compiled(OUT)` from Python.
"""
from __future__ import annotations

import argparse
import sys

from ..driver.export import WEIGHTS_CHOICES
from ..errors import TensorKilnError
from ..importers.onnx.model import load


def parse_shape(text: str, option: str) -> tuple[str, tuple[int, ...]]:
    """`name=1x3x224x224` (or 1,3,224,224; empty for a scalar) as (name, shape); SystemExit otherwise."""
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(d) for d in dims.replace(",", "x").split("x") if d.strip()) if sep else None
    except ValueError:
        shape = None
    if not name or shape is None or any(d < 0 for d in shape):
        raise SystemExit(f"tensorkiln: {option} expects NAME=SHAPE such as x=1x3x224x224, got {text!r}")
    return name, shape


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tensorkiln export`; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="tensorkiln export",
                                     description="export an ONNX model as a standalone C library")
    parser.add_argument("model", help="path of the .onnx file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="directory to write")
    parser.add_argument("--name", help="the library's name and C prefix (default: the file's name)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SHAPE",
                        help="the shape of an input, e.g. x=1x3x224x224 (needed for dynamic dimensions)")
    parser.add_argument("--weights", choices=WEIGHTS_CHOICES, default="auto",
                        help="embed the weights in the library, or write NAME.weights beside it "
                             "(auto: embedded up to 256 MiB)")
    parser.add_argument("--no-openmp", action="store_true", help="build without the OpenMP runtime (one thread)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    shapes = dict(parse_shape(item, "--input") for item in args.input)
    try:
        module = load(args.model)
        unknown = sorted(set(shapes) - set(module.input_names))
        if unknown:
            print(f"tensorkiln export: the model has no input {', '.join(unknown)} "
                  f"(inputs: {', '.join(module.input_names)})", file=sys.stderr)
            return 2
        exported = module.export(args.output, name=args.name, input_shapes=shapes, weights=args.weights,
                                 openmp=not args.no_openmp)
    except (TensorKilnError, TypeError) as err:
        print(f"tensorkiln export: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    manifest = exported.manifest
    size = exported.shared_library.stat().st_size
    print(f"exported {manifest.name} to {exported.directory}: {exported.shared_library.name} {size / 2 ** 20:.2f} MiB, "
          f"weights {exported.weights_bytes / 2 ** 20:.2f} MiB {manifest.weights_storage}, "
          f"built in {exported.seconds:.1f} s")
    for kind, specs in (("input ", manifest.inputs), ("output", manifest.outputs)):
        for spec in specs:
            print(f"  {kind} {spec.name}: {spec.dtype}{list(spec.shape)}")
    print(f"run it from C: make -C {exported.directory} run; from Python: tk.load_compiled({str(exported.directory)!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

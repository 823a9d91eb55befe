"""Cold and cached compile times of models through `tk.from_torch` and `tk.onnx.load`.

    python benchmarks/compile_time.py [MODEL ...] [--threads 2] [--json out.json]

MODEL: any of `tensorkiln bench`'s models built at batch 1 (default: resnet18 bert).

Each measurement is a fresh Python process with its own empty compile cache
(`TENSORKILN_CACHE` pointing at a new folder): "cold" compiles everything, the C compiler
included; "cached" runs the same import again in a new process over the cache the cold run
filled. Each time runs from before `import tensorkiln` to the end of the first call (float32,
batch 1); `tk.from_torch` also reports the part spent in torch.export, and the cold run the
part spent in the C compiler (the compile report's `compile_seconds`). The ONNX file is
exported once beforehand, outside the timings.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Runs in the child process: prints {"seconds": ..., "export_seconds": ...} as its last line.
CHILD = r"""
import json, sys, time
start = time.perf_counter()
import tensorkiln as tk
from tensorkiln.tools.bench import build
how, onnx_path, name = sys.argv[1], sys.argv[2], sys.argv[3]
model, inputs = build(name, 1)
arrays = [t.numpy() for t in inputs]
export_seconds = None
if how == "torch":
    import torch.export
    original = torch.export.export
    spent = []
    def timed_export(*args, **kwargs):
        begin = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - begin)
    torch.export.export = timed_export
    program = tk.from_torch(model, inputs)
    program(*arrays)
    seconds = time.perf_counter() - start
    export_seconds = sum(spent)
    c_seconds = program.report(*arrays).compile_seconds
else:
    module = tk.onnx.load(onnx_path)
    module(*arrays)
    seconds = time.perf_counter() - start
    c_seconds = module.report(*arrays).compile_seconds
print(json.dumps({"seconds": seconds, "export_seconds": export_seconds, "c_seconds": c_seconds}))
"""


def child(how: str, onnx_path: str, name: str, cache: str, threads: int) -> dict:
    env = dict(os.environ, TENSORKILN_CACHE=cache, OMP_NUM_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHILD, how, onnx_path, name], env=env, capture_output=True,
                          text=True, cwd=ROOT)  # `python -c` puts the working directory first on sys.path
    if done.returncode:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {how} compile failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def export_onnx(name: str, path: str) -> None:
    import torch
    sys.path.insert(0, ROOT)
    from tensorkiln.tools.bench import build
    model, inputs = build(name, 1)
    with torch.no_grad():
        torch.onnx.export(model, inputs, path, dynamo=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["resnet18", "bert"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tensorkiln-compile-time-") as scratch:
        for name in args.models:
            onnx_path = os.path.join(scratch, f"{name}.onnx")
            export_onnx(name, onnx_path)
            for how, label in (("torch", "tk.from_torch"), ("onnx", "tk.onnx.load")):
                cache = os.path.join(scratch, f"cache-{name}-{how}")
                os.makedirs(cache)
                cold = child(how, onnx_path, name, cache, args.threads)
                cached = child(how, onnx_path, name, cache, args.threads)
                results[f"{name} {how}"] = {"cold": cold, "cached": cached}
                export = (f" (torch.export {cold['export_seconds']:.2f} s / {cached['export_seconds']:.2f} s)"
                          if how == "torch" else "")
                print(f"{name} through {label:<14} cold {cold['seconds']:6.2f} s, C compiler {cold['c_seconds']:.2f} s "
                      f"of it, cached "
                      f"{cached['seconds']:6.2f} s{export}; float32, batch 1, {args.threads} thread(s), import and "
                      f"first call included")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

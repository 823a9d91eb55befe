"""Per-kernel times inside real models (`f.profile`), for the kernel figures that docs/kernels.md,
docs/performance.md, docs/architecture.md and docs/md.md cite.

    python benchmarks/kernel_profiles.py [CASE ...] [--threads 2] [--repeat 20] [--rounds 8] [--json out.json]

Cases (all float32, batch 1 unless named; default: every case):
  depthwise      MobileNetV2's depthwise convolutions: stride, channels, output size, layout, ms
  stem           ResNet-18's and MobileNetV2's first convolution and ResNet-18's stem max pooling
  winograd       ResNet-18's convolutions with the algorithm each runs (Winograd, blocked, ...), ms
  attention      BERT-base (seq 128) and GPT-2 prefill (128 tokens): the fused attention kernels
  lm_head        GPT-2's language-model head GEMM in the 128-token prefill (128 x 768 x 50257): ms, GFLOP/s
  kv_write       GPT-2's decode step: the kernels writing one token's row into each KV cache (in place)
  training_step  the digits CNN's compiled training step (batch 64, AdamW): all kernels, every
                 contraction (the first convolution's weight gradient, 9 x 4096 x 16, among them), the slowest
  fake_quant     a fake-quantization round trip over a 64 x 56 x 56 float32 tensor (float32 -> uint8 with
                 scale and zero point -> float32): every kernel of the compiled function
  dynamic_quantize  ONNX DynamicQuantizeLinear of a 128 x 768 float32 activation (what each GEMM of a
                 dynamic-int8 BERT-base quantizes per call): its range's reduce_max and reduce_min, the
                 quantization, every kernel
  md_pieces      in.lj (32,000 atoms) after 20 steps: CPU time (time.process_time) of the neighbour
                 build, the counting sort, a force call and the integration, and Amdahl's limit from them

Each model case compiles once, then takes `--rounds` profiles of `--repeat` calls each (`f.profile`
reads omp_get_wtime around each kernel of a separate timing build) and prints each kernel's minimum
and median over the rounds. The thread count is OMP_NUM_THREADS, set from --threads before the
OpenMP runtime loads. A loaded machine moves absolute times: compare kernels of one run.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
sys.path.insert(0, os.path.dirname(HERE))

CASES = ("depthwise", "stem", "winograd", "attention", "lm_head", "kv_write", "training_step", "fake_quant",
         "dynamic_quantize", "md_pieces")
# one graph node as KernelInfo prints it: "%1 = conv2d(%arg0, %0; groups=16, stride=(2, 2)) : f32[1,16,17,17]"
GEMMS = ("matmul", "matmul_packed", "conv2d", "conv2d_nchwc")  # the products inside a contraction kernel
NODE = re.compile(r"^%\w+ = (?P<op>\w+)\((?P<args>[^)]*(?:\([^)]*\)[^)]*)*)\) : \w+\[(?P<shape>[\d,]*)\]")


def parse_node(line: str) -> tuple[str, str, tuple[int, ...]]:
    """(op, attributes text, output shape) of one printed graph node."""
    match = NODE.match(line)
    if match is None:
        return "", "", ()
    shape = tuple(int(d) for d in match.group("shape").split(",") if d)
    return match.group("op"), match.group("args"), shape


def attribute(args: str, name: str) -> str | None:
    match = re.search(rf"\b{name}=(\([^)]*\)|[^,;)]+)", args)
    return match.group(1) if match else None


def profile_rounds(program, args, repeat: int, rounds: int) -> tuple[list, list[list[float]]]:
    """(the program's KernelInfo list, each kernel's mean seconds per call in every round)."""
    report = program.report(*args)
    times = [[] for _ in report.kernels]
    for _ in range(rounds):
        for index, kernel in enumerate(program.profile(*args, repeat=repeat).kernels):
            times[index].append(kernel.seconds)
    return report.kernels, times


def row(label: str, seconds: list[float], flops: float | None = None) -> dict:
    best, median = min(seconds), statistics.median(seconds)
    result = {"kernel": label, "min_ms": best * 1e3, "median_ms": median * 1e3}
    if flops:
        result["gflops_at_min"] = flops / best / 1e9
    return result


def print_rows(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    for r in rows:
        rate = f"  {r['gflops_at_min']:7.1f} GFLOP/s" if "gflops_at_min" in r else ""
        print(f"  {r['kernel']:<60} min {r['min_ms']:8.3f} ms  median {r['median_ms']:8.3f} ms{rate}")


def conv_of(kernel) -> tuple[str, str, tuple[int, ...]] | None:
    """The first convolution node of a kernel: (op, attributes, output shape), or None."""
    for line in kernel.nodes:
        op, args, shape = parse_node(line)
        if op.startswith("conv2d"):
            return op, args, shape
    return None


def channels_and_size(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(channels, height, width) of an NCHW or channel-blocked (N, C/b, H, W, b) output."""
    if len(shape) == 5:
        return shape[1] * shape[4], shape[2], shape[3]
    return shape[1], shape[2], shape[3]


def algorithm_of(kernel, op: str) -> str:
    """Which convolution template a kernel came from (by its op and its buffers' names)."""
    text = kernel.loop_ir
    if "wino_" in text:
        return "winograd"
    if op == "conv2d_nchwc":
        return "blocked (nchwc)"
    for marker, name in (("g_xpad", "gemm_rows"), ("g_acc", "gemm"), ("dw_pad", "depthwise"), ("sh_", "shallow")):
        if marker in text:
            return name
    return "direct"


def describe_conv(kernel) -> str:
    op, args, shape = conv_of(kernel)
    channels, height, width = channels_and_size(shape)
    stride = (attribute(args, "stride") or "(1, 1)").strip("()").split(",")[0].strip()
    groups = attribute(args, "groups") or "1"
    return (f"{kernel.name[:24]:<24} {channels:4d} ch -> {height}x{width}, stride {stride}, groups {groups}, "
            f"{algorithm_of(kernel, op)}")


@functools.lru_cache(maxsize=None)  # stem and winograd profile the same ResNet-18
def torch_model(name: str, batch: int = 1):
    """(tensorkiln program imported from the PyTorch reference model, its example arrays)."""
    from tensorkiln.importers.torch import from_torch
    from tensorkiln.tools.bench import build
    model, inputs = build(name, batch)
    return from_torch(model, inputs), [t.numpy() for t in inputs]


def case_depthwise(args) -> list[dict]:
    program, arrays = torch_model("mobilenetv2")
    kernels, times = profile_rounds(program, arrays, args.repeat, args.rounds)
    rows = []
    for kernel, seconds in zip(kernels, times):
        conv = conv_of(kernel)
        if conv and (attribute(conv[1], "groups") or "1") != "1":
            rows.append(row(describe_conv(kernel), seconds))
    print_rows("MobileNetV2, depthwise convolutions (fp32, batch 1)", rows)
    return rows


def case_stem(args) -> list[dict]:
    rows = []
    for name in ("resnet18", "mobilenetv2"):
        program, arrays = torch_model(name)
        kernels, times = profile_rounds(program, arrays, args.repeat, args.rounds)
        first_conv = next(i for i, k in enumerate(kernels) if conv_of(k))
        rows.append(row(f"{name} stem: {describe_conv(kernels[first_conv])}", times[first_conv]))
        pools = [i for i, k in enumerate(kernels) if any(parse_node(n)[0] == "window" for n in k.nodes)]
        if pools:
            rows.append(row(f"{name} stem pool: {kernels[pools[0]].name}", times[pools[0]]))
    print_rows("Stems (fp32, batch 1)", rows)
    return rows


def case_winograd(args) -> list[dict]:
    program, arrays = torch_model("resnet18")
    kernels, times = profile_rounds(program, arrays, args.repeat, args.rounds)
    rows = [row(describe_conv(k), s) for k, s in zip(kernels, times) if conv_of(k)]
    print_rows("ResNet-18, every convolution and its algorithm (fp32, batch 1)", rows)
    return rows


@functools.lru_cache(maxsize=1)
def gpt2_steps():
    """(prefill program, its args, decode-step program, its args) of GPT-2 small, fp32, a 128-token prompt."""
    import numpy as np
    import tensorkiln as tk
    from tensorkiln.models import GPT2Config, GPT2LMHeadModel
    from tensorkiln.tools.bench_gpt2 import GPT2_NEW_TOKENS, GPT2_PROMPT
    config = GPT2Config()
    tk.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.eval()
    ids = np.random.default_rng(1).integers(0, config.vocab_size, (1, GPT2_PROMPT))
    with tk.no_grad():
        prefill = tk.jit(model.prefill)
        step = tk.jit(model.decode_step, donate_argnums=2)
        prefill_args = (tk.tensor(ids), GPT2_PROMPT + GPT2_NEW_TOKENS)
        _, caches = prefill(*prefill_args)
        step_args = (tk.tensor(ids[:, -1:]), tk.tensor(np.int64(GPT2_PROMPT)), caches)
        step(*step_args)
    return prefill, prefill_args, step, step_args


def case_attention(args) -> list[dict]:
    rows = []
    program, arrays = torch_model("bert")
    kernels, times = profile_rounds(program, arrays, args.repeat, args.rounds)
    rows += [row(f"bert (seq 128): {k.name}", s) for k, s in zip(kernels, times) if k.kind == "attention"]
    prefill, prefill_args, _, _ = gpt2_steps()
    kernels, times = profile_rounds(prefill, prefill_args, args.repeat, args.rounds)
    rows += [row(f"gpt2 prefill (128 tokens): {k.name}", s) for k, s in zip(kernels, times) if k.kind == "attention"]
    print_rows("Fused attention kernels (fp32, batch 1)", rows)
    return rows


def case_lm_head(args) -> list[dict]:
    from tensorkiln.models import GPT2Config
    config = GPT2Config()
    prefill, prefill_args, _, _ = gpt2_steps()
    kernels, times = profile_rounds(prefill, prefill_args, args.repeat, args.rounds)
    rows = []
    for kernel, seconds in zip(kernels, times):
        logits = [shape for op, _, shape in map(parse_node, kernel.nodes)
                  if op in GEMMS and shape[-1:] == (config.vocab_size,)]  # the product, not the weight's permute
        if logits and kernel.kind == "contraction":
            tokens = math.prod(logits[0][:-1])
            flops = 2.0 * tokens * config.n_embd * config.vocab_size
            rows.append(row(f"gpt2 LM head {tokens} x {config.n_embd} x {config.vocab_size}: {kernel.name}",
                            seconds, flops))
    print_rows("GPT-2 prefill, language-model head (fp32, batch 1)", rows)
    return rows


def case_kv_write(args) -> list[dict]:
    _, _, step, step_args = gpt2_steps()
    kernels, times = profile_rounds(step, step_args, args.repeat, args.rounds)
    cache_shape = tuple(step_args[2][0].shape)
    writes = [(k, s) for k, s in zip(kernels, times)
              if any(parse_node(n)[0] == "where" and parse_node(n)[2] == cache_shape for n in k.nodes)]
    rows = [row(f"gpt2 decode KV-cache write {cache_shape}: {k.name}", s) for k, s in writes]
    if writes:
        medians = [statistics.median(s) for _, s in writes]
        print(f"\n{len(writes)} KV-cache write kernels, median of their medians "
              f"{statistics.median(medians) * 1e6:.1f} us")
    print_rows("GPT-2 decode step, KV-cache writes (fp32, batch 1)", rows)
    return rows


def case_training_step(args) -> list[dict]:
    import numpy as np
    import tensorkiln as tk
    import tensorkiln.nn.functional as F
    from train_digits import cnn
    tk.manual_seed(0)
    model = cnn()
    optimizer = tk.optim.AdamW(model.parameters(), lr=1e-3)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss
    rng = np.random.default_rng(0)
    x = tk.tensor(rng.random((64, 1, 8, 8), dtype=np.float32))
    y = tk.tensor(rng.integers(0, 10, 64))
    compiled = tk.jit(step)
    compiled(x, y)
    kernels, times = profile_rounds(compiled, (x, y), args.repeat, args.rounds)
    totals = [sum(column) for column in zip(*times)]
    rows = [row(f"all {len(kernels)} kernels of the step", totals)]
    rows += [row(f"{k.name} -> {' '.join(str(parse_node(n)[2]) for n in k.nodes if parse_node(n)[0] in GEMMS)}", s)
             for k, s in zip(kernels, times) if k.kind == "contraction"]
    slowest = sorted(range(len(kernels)), key=lambda i: -statistics.median(times[i]))[:8]
    rows += [row(f"slowest: {kernels[i].name}", times[i]) for i in slowest]
    print_rows("digits CNN training step, batch 64 (fp32): the sum, every contraction with the shapes of its "
               "products (the first convolution's weight gradient: 16 x 9 over 4096), the slowest kernels", rows)
    return rows


def case_fake_quant(args) -> list[dict]:
    import numpy as np
    import tensorkiln as tk
    scale, zero = 0.05, 128.0

    @tk.jit
    def round_trip(x):
        q = (x / scale + zero).to("uint8")  # truncates toward zero and saturates at 0 and 255 (docs/dtypes.md)
        return (q.to("float32") - zero) * scale
    x = tk.tensor(np.random.default_rng(0).normal(0.0, 3.0, (64, 56, 56)).astype(np.float32))
    round_trip(x)
    kernels, times = profile_rounds(round_trip, (x,), args.repeat, args.rounds)
    totals = [sum(column) for column in zip(*times)]
    rows = [row(f"fake-quant round trip, {len(kernels)} kernel(s) in all", totals)]
    rows += [row(k.name, s) for k, s in zip(kernels, times)]
    print_rows("fake quantization float32 -> uint8 -> float32, 64 x 56 x 56", rows)
    return rows


def case_dynamic_quantize(args) -> list[dict]:
    import tempfile
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import tensorkiln as tk
    outputs = [helper.make_tensor_value_info("y", TensorProto.UINT8, [128, 768]),
               helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("zero", TensorProto.UINT8, [])]
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])], "dq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 768])], outputs)
    path = os.path.join(tempfile.mkdtemp(prefix="tensorkiln-dq-"), "dq.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    module = tk.onnx.load(path)
    x = np.random.default_rng(0).standard_normal((128, 768)).astype(np.float32)
    module(x)
    kernels, times = profile_rounds(module, (x,), args.repeat, args.rounds)
    rows = [row(k.name, s) for k, s in zip(kernels, times)]
    print_rows("DynamicQuantizeLinear of a 128 x 768 float32 activation", rows)
    return rows


def case_md_pieces(args) -> list[dict]:
    from tensorkiln.md.in_lj import in_lj
    from tensorkiln.md.input_script import InputScript
    script = in_lj((20, 20, 20), run=20)
    state = InputScript(lambda line: None, threads=args.threads).run_text(script)
    sim = state.simulation

    def cpu(action) -> list[float]:
        samples = []
        for _ in range(args.rounds):
            start = time.process_time()
            action()
            samples.append(time.process_time() - start)
        return samples
    build = cpu(sim.build_neighbor_list)  # wrap, counting sort by cell, neighbour list
    neighbor = cpu(lambda: sim.programs("neighbor", sim.x, sim.cell_sorted, sim.cell_start, sim.stencil,
                                        sim.neighbors, sim.neighbor_count, sim.most_neighbors))
    sort = [max(b - n, 0.0) for b, n in zip(build, neighbor)]
    force = cpu(lambda: sim.compute_forces(energy=False))
    integrate = cpu(lambda: (sim.programs("initial_integrate", sim.f, sim.x, sim.v),
                             sim.programs("final_integrate", sim.f, sim.v, sim.kinetic)))
    every = 20
    rows = [row("neighbour build, sort included (per build)", build),
            row("neighbour list alone (per build)", neighbor),
            row("wrap + counting sort (per build: the build less the list)", sort),
            row("force call", force), row("initial + final integration", integrate)]
    serial = statistics.median(sort) / every
    parallel = (statistics.median(force) + statistics.median(integrate)
                + statistics.median(neighbor) / every)
    fraction = serial / (serial + parallel)
    print_rows(f"in.lj, 32,000 atoms, after 20 steps, {args.threads} thread(s), CPU seconds (fp64)", rows)
    print(f"  serial fraction f <= {fraction:.2%} (the sort once every {every} steps; the foreign calls "
          f"are inside the pieces): Amdahl limit {1 / (fraction + (1 - fraction) / 2):.2f}x on 2 threads, "
          f"{1 / (fraction + (1 - fraction) / 100):.0f}x on 100")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=list(CASES), help=", ".join(CASES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="calls per profile")
    parser.add_argument("--rounds", type=int, default=8, help="profiles per kernel (min and median over them)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before the first compiled library loads OpenMP
    from common import machine_summary, write_json
    print(f"kernel profiles, fp32, {args.threads} thread(s), {args.rounds} rounds of {args.repeat} calls; "
          f"{machine_summary()}")
    results = {"threads": args.threads, "repeat": args.repeat, "rounds": args.rounds, "precision": "fp32"}
    for case in args.cases:
        results[case] = globals()[f"case_{case}"](args)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()

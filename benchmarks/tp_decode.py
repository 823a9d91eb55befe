"""Tensor-parallel GPT-2 small decode: 1 rank against 2 ranks in turns, and the ways of one token in turns.

    python benchmarks/tp_decode.py [--rounds 5] [--tokens 24] [--json out.json]

Each round launches the decode on 1 rank, then on 2 ranks (one OpenMP thread each, `--wait auto`, as
`tensorkiln launch` makes them), so every 2-rank figure has a 1-rank one taken just before it: the
ratio is reported per pair and as the median of the pairs. Within each launch the tokens take three
ways in turns, token after token on the same KV cache:

- greedy: the compiled step returns the next token (decode_greedy_step: the argmax inside; on 2 ranks
  vocab-parallel, two all-reduces of one value), its all-reduces through the ranks' shared memory, run
  in C from the generated code's runtime hook (runtime/native_all_reduce.py);
- greedy through Python: as greedy, each all-reduce's start and wait through Python's hook
  (native_all_reduce.set_enabled(False)), as before the native path;
- logits: the compiled step returns the logits (on 2 ranks an all-gather of the vocabulary's 50257)
  and numpy takes their argmax, as the decode did before the greedy step;
- greedy through MPI: as greedy, the all-reduces through MPI's own (Channel.share_memory_without_progress
  off), as before the shared path.

The figures are medians over a launch's tokens (after a warm-up), float32. Every way's tokens must
agree with the 1-rank run's (the script checks it). Each round also times, on 2 ranks, one compiled
all-reduce of a token's 768 features (collective_channel.Channel, a sum of float32, start and wait)
through the ranks' shared memory and through MPI's all-reduce, in turns call after call, each call
after a barrier.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from common import machine_summary, print_table, write_json  # noqa: E402
from mpi_launches import launch as launch_worker  # noqa: E402
from mpi_launches import write_result  # noqa: E402

WAYS = ("greedy", "greedy through Python", "logits", "greedy through MPI")
PROMPT, WARMUP = 8, 3


def prefilled_decode(cache_tokens: int):
    """(On every rank, after dist.init) GPT-2 small split over the ranks (weights drawn after
    tk.manual_seed(0)), its KV cache of `cache_tokens` positions filled with a fixed prompt of PROMPT
    tokens, and the first greedy token: (model, caches, token)."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln.models import GPT2Config, GPT2LMHeadModel
    tk.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(), tensor_parallel=dist.world_size())
    prompt = np.random.default_rng(0).integers(0, 50257, (1, PROMPT))
    with tk.no_grad():
        logits, caches = tk.jit(model.prefill)(tk.tensor(prompt), cache_tokens)
        token = tk.tensor(logits[:, -1].argmax(-1).numpy().reshape(1, 1))
    return model, caches, token


def worker_decode(tokens: int) -> dict:
    """(In a worker) GPT-2 small split over every rank; per way, the median seconds of its tokens."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln.runtime import native_all_reduce
    from tensorkiln.runtime.collective_channel import Channel
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    count = len(WAYS) * (tokens + WARMUP)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    chosen = []
    model, caches, token = prefilled_decode(PROMPT + count)
    with tk.no_grad():
        greedy = tk.jit(model.decode_greedy_step, donate_argnums=2)
        with_logits = tk.jit(model.decode_step, donate_argnums=2)
        for i in range(count):
            way = WAYS[i % len(WAYS)]
            Channel.share_memory_without_progress = way != "greedy through MPI"  # the same on every rank
            native_all_reduce.set_enabled(way != "greedy through Python")  # and Python's hook or MPI
            dist.barrier()
            start = time.perf_counter()
            position = tk.tensor(np.int64(PROMPT + i))
            if way == "logits":
                logits, caches = with_logits(token, position, caches)
                token = tk.tensor(logits[:, -1].argmax(-1).numpy().reshape(1, 1))
            else:
                token, caches = greedy(token, position, caches)
            chosen.append(int(token.numpy()[0, 0]))
            times[way].append(time.perf_counter() - start)
    return {"token_seconds": {way: float(np.median(t[WARMUP:])) for way, t in times.items()}, "tokens": chosen}


def worker_all_reduce(repeats: int = 200, count: int = 768) -> dict:
    """(In a worker) the median seconds of one all-reduce of `count` float32, shared memory and MPI in turns."""
    import tensorkiln.distributed as dist
    from tensorkiln.runtime import communicator
    from tensorkiln.runtime.collective_channel import Channel
    dist.init(check_agreement=False)
    fields = {"group": "world", "dtype": "float32", "in": str(count), "out": str(count), "reduction": "sum",
              "overlap": "none"}
    channel = Channel("all_reduce", fields)
    operand = np.random.default_rng(dist.rank()).standard_normal(count).astype(np.float32)
    output = np.empty_like(operand)
    times: dict[str, list[float]] = {"shared memory": [], "MPI": []}
    for _ in range(repeats):
        for way in times:
            Channel.share_memory_without_progress = way == "shared memory"
            communicator.barrier()
            start = time.perf_counter()
            channel.start(operand.ctypes.data)
            channel.wait(output.ctypes.data)
            times[way].append(time.perf_counter() - start)
    return {way: float(np.median(t[10:])) for way, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None, help="(a worker) its timed tokens per way")
    parser.add_argument("--result", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=24, help="timed tokens per way and launch")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.worker:
        work = worker_all_reduce() if args.worker == "all_reduce" else worker_decode(int(args.worker))
        write_result(work, args.result)
        return 0
    print(f"machine: {machine_summary()}; GPT-2 small, float32, 1 OpenMP thread per rank; load average "
          f"{os.getloadavg()[0]:.1f} at the start")
    pairs = []
    for round_ in range(args.rounds):
        one, two = (launch_worker(__file__, str(args.tokens), ranks) for ranks in (1, 2))
        if one["tokens"] != two["tokens"]:
            raise SystemExit(f"round {round_}: 2 ranks chose other tokens than 1 rank")
        paths = launch_worker(__file__, "all_reduce", 2)
        pairs.append({"one": one["token_seconds"], "two": two["token_seconds"], "load": os.getloadavg()[0],
                      "all_reduce_768": paths})
        print(f"round {round_}: 1 rank {one['token_seconds']['greedy'] * 1e3:.1f} ms, 2 ranks "
              f"{two['token_seconds']['greedy'] * 1e3:.1f} ms, load {pairs[-1]['load']:.1f}; an all-reduce of 768 float32: "
              + ", ".join(f"{way} {t * 1e6:.1f} us" for way, t in paths.items()), flush=True)
    rows = []
    for way in WAYS:
        ratios = [p["one"]["greedy"] / p["two"][way] for p in pairs]
        rows.append([way, f"{np.median([p['one'][way] for p in pairs]) * 1e3:.1f}",
                     f"{np.median([p['two'][way] for p in pairs]) * 1e3:.1f}",
                     " ".join(f"{r:.2f}" for r in ratios), f"{np.median(ratios):.2f}x"])
    print("\nms per token (medians over rounds); ratio: 1 rank greedy / 2 ranks this way, per round")
    print_table(["way", "1 rank", "2 ranks", "ratio per round", "median ratio"], rows)
    ways = pairs[0]["all_reduce_768"]
    print("an all-reduce of 768 float32 on 2 ranks, median over rounds: "
          + ", ".join(f"{way} {np.median([p['all_reduce_768'][way] for p in pairs]) * 1e6:.1f} us" for way in ways))
    if args.json:
        write_json(args.json, {"pairs": pairs})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The weight stream's software prefetch (kernels/templates/stream_prefetch.py) in GPT-2 small's decode,
on 1 rank and on 2 tensor-parallel ranks, the prefetch settings in turns token after token.

    python benchmarks/matvec_prefetch.py [--rounds 3] [--tokens 12] [--ways none,nta:1024,nta:4096]

Each launch (1 rank, then 2 ranks, one OpenMP thread each, `--wait auto`, as `tensorkiln launch` makes
them) compiles the greedy decode step once per way (`none`: the hardware prefetchers alone; `HINT:BYTES`:
prefetch with that x86 hint so many bytes ahead; `described`: what the target description gives) and
runs the tokens through the ways in turns on one KV cache, so every way sees the same load. A way's
figure is the median of its tokens (after a warm-up); the table gives, per way, the median over rounds
and the ratio of 1 rank's `none` to 2 ranks' way, per round. Every way's tokens must equal the 1-rank
`none` ones (the script checks it): a prefetch changes no result.
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
from tp_decode import PROMPT, prefilled_decode  # noqa: E402

WARMUP = 2


def setting(way: str):
    """The prefetch a way names (stream_prefetch.WEIGHT_STREAM_PREFETCH's value)."""
    from tensorkiln.kernels.templates import stream_prefetch
    if way == "none":
        return None
    if way == "described":
        return stream_prefetch.DESCRIBED
    hint, distance = way.split(":")
    return stream_prefetch.StreamPrefetch(hint, int(distance))


def worker_decode(ways: list[str], tokens: int) -> dict:
    """(In a worker) GPT-2 small over every rank; per way, the median seconds of its tokens."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln.kernels.templates import stream_prefetch
    dist.init(check_agreement=False)
    count = len(ways) * (tokens + WARMUP)
    times: dict[str, list[float]] = {way: [] for way in ways}
    chosen = []
    model, caches, token = prefilled_decode(PROMPT + count + 1)
    with tk.no_grad():
        steps = {}
        for way in ways:  # each way's library is built (or found in the cache) under its own setting
            stream_prefetch.WEIGHT_STREAM_PREFETCH = setting(way)
            steps[way] = tk.jit(model.decode_greedy_step, donate_argnums=2)
        for i in range(count):
            way = ways[i % len(ways)]
            stream_prefetch.WEIGHT_STREAM_PREFETCH = setting(way)  # a first call compiles under its way
            dist.barrier()
            start = time.perf_counter()
            token, caches = steps[way](token, tk.tensor(np.int64(PROMPT + i)), caches)
            chosen.append(int(token.numpy()[0, 0]))
            times[way].append(time.perf_counter() - start)
    return {"token_seconds": {way: float(np.median(t[WARMUP:])) for way, t in times.items()}, "tokens": chosen}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", default=None)
    parser.add_argument("--result", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=12, help="timed tokens per way and launch")
    parser.add_argument("--ways", default="none,described", help="comma-separated: none, described, HINT:BYTES")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    ways = args.ways.split(",")
    if args.worker:
        write_result(worker_decode(ways, int(args.worker)), args.result)
        return 0
    print(f"machine: {machine_summary()}; GPT-2 small decode, float32, 1 OpenMP thread per rank; ways in turns "
          f"token after token: {', '.join(ways)}; load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    rounds = []
    for round_ in range(args.rounds):
        script = [os.path.abspath(__file__), "--ways", args.ways]
        one, two = (launch_worker(script[0], str(args.tokens), ranks, extra=script[1:]) for ranks in (1, 2))
        if one["tokens"] != two["tokens"]:
            raise SystemExit(f"round {round_}: 2 ranks chose other tokens than 1 rank")
        rounds.append({"one": one["token_seconds"], "two": two["token_seconds"], "load": os.getloadavg()[0]})
        print(f"round {round_} (load {rounds[-1]['load']:.1f}): " + "; ".join(
            f"{way} {one['token_seconds'][way] * 1e3:.1f} / {two['token_seconds'][way] * 1e3:.1f} ms"
            for way in ways), flush=True)
    rows = []
    for way in ways:
        ratios = [r["one"][ways[0]] / r["two"][way] for r in rounds]
        one_vs = [r["one"][way] / r["one"][ways[0]] for r in rounds]
        rows.append([way, f"{np.median([r['one'][way] for r in rounds]) * 1e3:.1f}",
                     f"{np.median(one_vs):.3f}", f"{np.median([r['two'][way] for r in rounds]) * 1e3:.1f}",
                     " ".join(f"{x:.2f}" for x in ratios), f"{np.median(ratios):.2f}x"])
    print(f"\nms per token, medians over rounds; '1 rank / {ways[0]}': this way's 1-rank time over {ways[0]}'s "
          f"in the same launch; 2-rank ratio: 1 rank {ways[0]} / 2 ranks this way")
    print_table(["way", "1 rank", f"1 rank / {ways[0]}", "2 ranks", "ratio per round", "median ratio"], rows)
    if args.json:
        write_json(args.json, {"ways": ways, "rounds": rounds})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tensor-parallel decode and memory bandwidth for distributed.py: the GPT-2 decode and STREAM
workers (run under mpiexec), and their report: the roofline the STREAM bandwidth sets for a decode
step, where a token's time goes, and the share of the weights on 2 MiB pages.
"""
from __future__ import annotations

import time

import numpy as np

from common import print_table
from distributed_workers import WARMUP
from mpi_launches import median_of
from stream_kernels import BYTES_PER_ELEMENT as STREAM_BYTES
from stream_kernels import KERNELS as STREAM_KERNELS
from stream_kernels import StreamKernels


def worker_gpt2_decode(tokens: int = 16) -> dict:
    """Per-token decode latency of GPT-2 small, split over every rank (tensor_parallel = world size)."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    from tensorkiln.models import GPT2Config, GPT2LMHeadModel
    dist.init(check_agreement=False)  # as the peers: no extra message per collective
    size = dist.world_size()
    tk.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(), tensor_parallel=size)
    prompt = np.random.default_rng(0).integers(0, 50257, (1, 8))
    with tk.no_grad():
        prefill = tk.jit(model.prefill)
        # the greedy step: the argmax inside the compiled call (vocab-parallel on 2 ranks: two all-reduces
        # of one value instead of gathering 50257 logits); its token is the next call's argument as it is
        step = tk.jit(model.decode_greedy_step, donate_argnums=2)
        logits, caches = prefill(tk.tensor(prompt), 8 + tokens + WARMUP + 1)
        token = tk.tensor(logits[:, -1].argmax(-1).numpy().reshape(1, 1))
        times, calls, chosen = [], [], []
        for i in range(tokens + WARMUP):
            dist.barrier()
            start = time.perf_counter()
            position = tk.tensor(np.int64(8 + i))
            called = time.perf_counter()
            token, caches = step(token, position, caches)
            calls.append(time.perf_counter() - called)
            chosen.append(int(token.numpy()[0, 0]))
            times.append(time.perf_counter() - start)
        last = (token, tk.tensor(np.int64(8 + tokens + WARMUP - 1)), caches)
        kernels = step.report(*last).kernels
        profile = step.profile(*last, repeat=5)
        # the logits of the next position, to compare 1 and 2 ranks (the step that returns them)
        logits, _ = tk.jit(model.decode_step)(token, tk.tensor(np.int64(8 + tokens + WARMUP)), caches)
    # the collectives of one token's compiled step, by op (each is a start and a wait kernel)
    collectives: dict[str, int] = {}
    for k in kernels:
        if k.name.endswith("_start"):
            op = k.name.split("_", 1)[1].rsplit("_", 1)[0]
            collectives[op] = collectives.get(op, 0) + 1
    # what one token reads: every weight of this rank's shard once (the position table: one row)
    weight_bytes = sum(p.numel() * p.dtype.itemsize for p in model.parameters())
    all_ranks_bytes = float(dist.all_reduce(tk.tensor(np.float64(weight_bytes))).numpy())
    token_seconds, call_seconds = float(np.median(times[WARMUP:])), float(np.median(calls[WARMUP:]))
    return {"token_seconds": token_seconds, "tokens": chosen, "logits": logits.numpy().tolist(),
            "waits_per_rank": waits_per_rank(profile),
            "weight_bytes_per_rank": weight_bytes, "weight_bytes_all_ranks": all_ranks_bytes,
            "collectives_per_token": collectives, "layers": model.config.n_layer,
            "breakdown": decode_breakdown(profile, token_seconds, call_seconds, weight_bytes),
            "huge_page_share": huge_page_share([p._value for p in model.parameters()])}


FMA_ITERATIONS = 2_000_000  # ~10 ms of FMA chains a pass on one core


def worker_stream(elements: int = 16 * 2 ** 20, repeats: int = 20) -> dict:
    """Memory bandwidth with every rank streaming at once: STREAM's copy, add and triad, and a read-only
    pass (the decode's traffic) plain and with software prefetch (stream_kernels.py), on float32 arrays
    of 64 MiB each (twice the L3), in turns pass after pass. The ranks start each pass together (a
    barrier); a kernel's bandwidth is all ranks' bytes over its median pass."""
    import tensorkiln.distributed as dist
    from tensorkiln.runtime import communicator
    dist.init(check_agreement=False)
    kernels = StreamKernels(elements)
    times: dict[str, list[float]] = {kind: [] for kind in STREAM_KERNELS}
    for _ in range(repeats):
        for kind in times:
            communicator.barrier()
            start = time.perf_counter()
            kernels.run(kind)
            communicator.barrier()  # the pass ends when the slowest rank's ends
            times[kind].append(time.perf_counter() - start)
    result = {f"{kind}_bandwidth": STREAM_BYTES[kind] * elements * dist.world_size() / float(np.median(t[3:]))
              for kind, t in times.items()}
    result["bandwidth"] = result["add_bandwidth"]  # the roofline's: add's traffic, 2 reads and 1 write
    fma_seconds = []
    for _ in range(repeats):  # compute's ceiling beside memory's: FMA chains in registers on every rank at once
        communicator.barrier()
        start = time.perf_counter()
        flops = kernels.fma_flops(FMA_ITERATIONS)
        communicator.barrier()
        fma_seconds.append(time.perf_counter() - start)
    result["fma_flops_per_second"] = flops * dist.world_size() / float(np.median(fma_seconds[3:]))
    result["huge_page_share"] = huge_page_share([kernels.a, kernels.b, kernels.c])
    return result


def huge_page_share(arrays: list[np.ndarray]) -> float:
    """The share of the arrays' bytes that Linux holds in 2 MiB pages (numpy asks for them,
    madvise(MADV_HUGEPAGE), on every large array): each memory mapping's AnonHugePages over its resident
    bytes, weighted by the arrays' bytes inside it (/proc/self/smaps)."""
    mappings, current = [], None
    try:
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()
                if "-" in head[0] and len(head) >= 5:  # a mapping's first line: start-end perms ...
                    start, end = (int(v, 16) for v in head[0].split("-"))
                    current = {"start": start, "end": end, "rss": 0, "huge": 0}
                    mappings.append(current)
                elif head[0] == "Rss:":
                    current["rss"] = int(head[1])
                elif head[0] == "AnonHugePages:":
                    current["huge"] = int(head[1])
    except (OSError, IndexError, ValueError, TypeError):
        return float("nan")
    total = huge = 0.0
    for array in arrays:
        lo, hi = array.ctypes.data, array.ctypes.data + array.nbytes
        for m in mappings:
            inside = min(hi, m["end"]) - max(lo, m["start"])
            if inside > 0:
                total += inside
                huge += inside * (m["huge"] / m["rss"] if m["rss"] else 0.0)
    return huge / total if total else float("nan")


def waits_per_rank(profile) -> list[list[float]]:
    """(On every rank) the seconds each rank's profile spent in each collective's wait kernel, in program
    order: row r is rank r's. Where the ranks' work between two collectives is equal and they start
    together, both wait about the collective's own latency; where one arrives late, the other waits the
    difference. So the rows say which rank waits where (and the other was the slow one)."""
    import tensorkiln as tk
    import tensorkiln.distributed as dist
    mine = np.array([k.seconds for k in profile.kernels if k.name.endswith("_wait")], np.float64)
    return dist.all_gather(tk.tensor(mine[None]), dim=0).numpy().tolist()


def wait_summary(waits: list[list[float]]) -> str:
    """One line: each rank's waits per token, and at how many collectives each waited the longer."""
    table = np.array(waits)
    longer = np.argmax(table, axis=0)
    return ("; ".join(f"rank {r} waits {table[r].sum() * 1e3:.2f} ms, the longer wait at "
                      f"{int((longer == r).sum())} of {table.shape[1]}" for r in range(table.shape[0]))
            + f"; at each collective the shorter of the ranks' waits (its own latency) sums to "
              f"{table.min(axis=0).sum() * 1e3:.2f} ms")


def decode_breakdown(profile, token_seconds: float, call_seconds: float, weight_bytes: float) -> dict:
    """Where a decode step's time goes, from its kernel profile: the matrix-vector products (contraction
    kernels: the bandwidth they reach reading this rank's weights), the collectives (starts and waits:
    the all-reduces' latency and the wait for the other rank), the rest; and from the timed tokens, the
    Python around the compiled call (the token's tensors, the argmax of the logits, the loop)."""
    contraction = [k for k in profile.kernels if k.kind == "contraction"]
    collective = [k for k in profile.kernels if k.name.endswith(("_start", "_wait"))]
    largest = max(contraction, key=lambda k: k.seconds)
    gemv = sum(k.seconds for k in contraction)
    waits = sum(k.seconds for k in collective)
    return {"gemv_ms": gemv * 1e3, "gemv_GBps": weight_bytes / gemv / 1e9, "collectives_ms": waits * 1e3,
            "other_kernels_ms": (profile.total_seconds - gemv - waits) * 1e3,
            "call_ms": call_seconds * 1e3, "outside_call_ms": (token_seconds - call_seconds) * 1e3,
            "largest_kernel": largest.name, "largest_kernel_ms": largest.seconds * 1e3}


def decode_roofline(weight_bytes: float, one_seconds: float, two_seconds: float, stream_one: float,
                    stream_two: float) -> dict:
    """A decode step reads every weight once (matrix-vector products: 2 flops per 4-byte weight), so its
    time is at least the weights' bytes over the memory bandwidth: on 2 ranks, each reading its half at
    once, the bandwidth of 2 processes streaming together."""
    best_two = weight_bytes / stream_two
    return {"weight_bytes": weight_bytes, "stream_one_process_GBps": stream_one / 1e9,
            "stream_two_processes_GBps": stream_two / 1e9, "one_rank_GBps": weight_bytes / one_seconds / 1e9,
            "two_rank_GBps": weight_bytes / two_seconds / 1e9,
            "one_rank_of_stream": weight_bytes / one_seconds / stream_one,
            "two_rank_of_stream": weight_bytes / two_seconds / stream_two,
            "roofline_token_ms": best_two * 1e3, "roofline_speedup": one_seconds / best_two}


def decode_results(runs: dict[str, list[dict]]) -> dict:
    """The decode's figures from the launches of `gpt2_decode` and `stream` on 1 and 2 ranks: the token's
    time, the agreement of the two runs, the roofline, STREAM's bandwidths and the time breakdown."""
    gpt_one, gpt_two = median_of(runs["gpt2_decode@1"], "token_seconds"), median_of(runs["gpt2_decode@2"],
                                                                                    "token_seconds")
    same_tokens = runs["gpt2_decode@1"][0]["tokens"] == runs["gpt2_decode@2"][0]["tokens"]
    logits_one, logits_two = (np.array(runs[f"gpt2_decode@{n}"][0]["logits"]) for n in (1, 2))
    logit_error = float(np.max(np.abs(logits_two - logits_one)) / np.max(np.abs(logits_one)))
    stream_one, stream_two = median_of(runs["stream@1"], "bandwidth"), median_of(runs["stream@2"], "bandwidth")
    roofline = decode_roofline(runs["gpt2_decode@1"][0]["weight_bytes_all_ranks"], gpt_one, gpt_two, stream_one,
                               stream_two)
    stream = {f"{kind}_{n}": median_of(runs[f"stream@{n}"], f"{kind}_bandwidth") / 1e9
              for kind in STREAM_KERNELS for n in (1, 2)}
    breakdown = {n: {key: float(np.median([r["breakdown"][key] for r in runs[f"gpt2_decode@{n}"]]))
                     for key in runs[f"gpt2_decode@{n}"][0]["breakdown"] if key != "largest_kernel"}
                 for n in (1, 2)}
    huge_pages = {n: median_of(runs[f"gpt2_decode@{n}"], "huge_page_share") for n in (1, 2)}
    fma = {n: median_of(runs[f"stream@{n}"], "fma_flops_per_second") / 1e9 for n in (1, 2)}
    return {"one_rank_token_ms": gpt_one * 1e3, "two_rank_token_ms": gpt_two * 1e3,
            "speedup": gpt_one / gpt_two, "same_tokens": same_tokens, "logits_relative_error": logit_error,
            "collectives_per_token": runs["gpt2_decode@2"][0]["collectives_per_token"], **roofline,
            "stream_GBps": stream, "fma_GFLOPs": fma, "breakdown": breakdown, "weights_on_huge_pages": huge_pages}


def print_decode(decode: dict, runs: dict[str, list[dict]]) -> None:
    """The decode's lines of the report: `decode` is decode_results(runs)."""
    stream, breakdown, huge_pages = decode["stream_GBps"], decode["breakdown"], decode["weights_on_huge_pages"]
    print(f"GPT-2 small decode, tensor parallel: 1 rank {decode['one_rank_token_ms']:.1f} ms/token, 2 ranks "
          f"{decode['two_rank_token_ms']:.1f} ms/token ({decode['speedup']:.2f}x); same tokens: "
          f"{decode['same_tokens']}; logits rel. error {decode['logits_relative_error']:.1e}")
    print("  memory bandwidth (STREAM kernels in C, float32, 64 MiB arrays, every process at once), GB/s:")
    print_table(["kernel", "1 process", "2 processes", "2 / 1"],
                [[kind, f"{stream[f'{kind}_1']:.1f}", f"{stream[f'{kind}_2']:.1f}",
                  f"{stream[f'{kind}_2'] / stream[f'{kind}_1']:.2f}x"] for kind in STREAM_KERNELS])
    best_read = max(("read", "read, prefetcht0", "read, prefetchnta"), key=lambda kind: stream[f"{kind}_2"])
    print(f"  the ceiling the memory system sets at equal efficiency: 2 processes read "
          f"{stream['read_2'] / stream['read_1']:.2f}x what one reads ({best_read}: "
          f"{stream[f'{best_read}_2'] / stream[f'{best_read}_1']:.2f}x), add "
          f"{stream['add_2'] / stream['add_1']:.2f}x; the decode on 2 ranks: {decode['speedup']:.2f}x")
    fma = decode["fma_GFLOPs"]
    print(f"  compute (FMA chains in registers, float32, every process at once): 1 process {fma[1]:.1f} GFLOP/s, "
          f"2 processes {fma[2]:.1f} GFLOP/s ({fma[2] / fma[1]:.2f}x): the ceiling of compute-bound work on 2 ranks "
          "(about 1x where the two cores are one physical core's hardware threads)")
    for n in (1, 2):
        b = breakdown[n]
        print(f"  {n} rank(s), per token: kernel profile: matrix-vector products {b['gemv_ms']:.1f} ms "
              f"({b['gemv_GBps']:.1f} GB/s over this rank's weights), collectives {b['collectives_ms']:.2f} ms, "
              f"other kernels {b['other_kernels_ms']:.2f} ms; timed: the compiled call {b['call_ms']:.1f} ms, "
              f"Python around it {b['outside_call_ms']:.2f} ms; "
              f"largest kernel {runs[f'gpt2_decode@{n}'][0]['breakdown']['largest_kernel']} "
              f"{b['largest_kernel_ms']:.1f} ms; weights on 2 MiB pages: {100 * huge_pages[n]:.0f}%")
    print(f"  a token reads {decode['weight_bytes'] / 1e6:.0f} MB of weights: 1 rank at "
          f"{decode['one_rank_GBps']:.1f} GB/s ({100 * decode['one_rank_of_stream']:.0f}% of 1 process's STREAM), "
          f"2 ranks at {decode['two_rank_GBps']:.1f} GB/s ({100 * decode['two_rank_of_stream']:.0f}% of 2 "
          f"processes'); roofline: {decode['roofline_token_ms']:.1f} ms/token on 2 ranks, at most "
          f"{decode['roofline_speedup']:.2f}x over 1 rank")
    print(f"  who waits (2 ranks, each rank's kernel profile): {wait_summary(runs['gpt2_decode@2'][0]['waits_per_rank'])}")
    print(f"  collectives per token on 2 ranks ({runs['gpt2_decode@2'][0]['layers']} layers): "
          + ", ".join(f"{count} {op}" for op, count in sorted(decode["collectives_per_token"].items())))

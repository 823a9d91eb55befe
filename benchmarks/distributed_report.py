"""The report of distributed.py: from the launches' figures to the tables it prints and the JSON it writes.

The network fitted to the ping-pong, the data-parallel steps against the alpha-beta model of their
overlapped all-reduces, the bucket choices and all-reduce paths, PyTorch DDP, the tensor-parallel
decode (distributed_decode.py), and the weak scaling the model predicts on a stated network.
"""
from __future__ import annotations

import numpy as np

from common import print_table
from distributed_decode import decode_results, print_decode
from distributed_workers import ALL_REDUCE_PATHS
from mpi_launches import median_of
from tensorkiln.distributed.cost_model import (Network, TimelineEvent, amdahl_serial_fraction, all_reduce_seconds,
                                               predict_data_parallel_step, predict_overlapped_ranks)

STATED_NETWORK = Network.from_link(100, 2.0)  # 100 Gb/s, 2 us: an InfiniBand-class cluster link


def report(runs: dict[str, list[dict]], plot_path: str | None = None) -> dict:
    """Print the report of the launches `runs` (configuration `worker@ranks[/yield]` -> each launch's
    figures, in rounds) and return its figures; `plot_path`: where the predicted scaling curves go."""
    net_fit, yield_fit = runs["ping_pong@2"][0], runs["ping_pong@2/yield"][0]
    net = Network(net_fit["alpha"], net_fit["beta"], "ping-pong here")
    results = {"network": {"alpha_us": net.alpha * 1e6, "bandwidth_GBps": net.bandwidth / 1e9,
                           "points": net_fit["points"], "all_reduce_8_bytes_us": net_fit["all_reduce_8_bytes"] * 1e6,
                           "yield_alpha_us": yield_fit["alpha"] * 1e6,
                           "yield_all_reduce_8_bytes_us": yield_fit["all_reduce_8_bytes"] * 1e6}}
    rows = []
    for model in ("cnn", "cnn_sync", "bert"):
        one, two = median_of(runs[f"{model}@1"], "step_seconds"), median_of(runs[f"{model}@2"], "step_seconds")
        compute = median_of(runs[f"{model}@2"], "compute_step_seconds")
        alone = median_of(runs[f"{model}@2"], "one_process_step_seconds")
        paired = median_of(runs[f"{model}@2"], "paired_ratio")
        buckets = runs[f"{model}@2"][0]["bucket_bytes"]
        without_overlap = predict_data_parallel_step(compute, buckets, 2, net).step_seconds
        predicted = model_overlapped_step(runs[f"{model}@2"], net)
        curve_one, curve_two = np.array(runs[f"{model}@1"][0]["losses"]), np.array(runs[f"{model}@2"][0]["losses"])
        drift = float(np.max(np.abs(curve_two - curve_one) / np.abs(curve_one)))
        results[model] = {"one_rank_step_ms": one * 1e3, "two_rank_step_ms": two * 1e3,
                          "throughput_ratio": one / two, "two_rank_compute_ms": compute * 1e3,
                          "in_turns_one_process_step_ms": alone * 1e3, "in_turns_throughput_ratio": paired,
                          "model_two_rank_step_ms": predicted * 1e3, "model_error": predicted / two - 1,
                          "model_without_overlap_ms": without_overlap * 1e3, "buckets": buckets,
                          "gradient_bytes": sum(buckets), "loss_curve_max_relative_difference": drift,
                          "amdahl_serial_fraction": amdahl_serial_fraction(one / two, 2)}
        rows.append([model, f"{one * 1e3:.2f}", f"{two * 1e3:.2f}", f"{one / two:.2f}x", f"{alone * 1e3:.2f}",
                     f"{paired:.2f}x", f"{compute * 1e3:.2f}",
                     str(len(buckets)), f"{predicted * 1e3:.2f}", f"{100 * (predicted / two - 1):+.0f}%",
                     f"{without_overlap * 1e3:.2f}", f"{drift:.1e}"])
    torch_two = median_of(runs["torch_ddp@2"], "step_seconds")
    results["torch_ddp_gloo"] = {"two_rank_step_ms": torch_two * 1e3,
                                 "one_rank_step_ms": median_of(runs["torch_ddp@1"], "step_seconds") * 1e3,
                                 "tensorkiln_speedup": torch_two / median_of(runs["cnn@2"], "step_seconds")}
    results["gpt2_tensor_parallel_decode"] = decode_results(runs)
    print(f"\nping-pong, --wait auto (spinning on an idle machine): alpha {net.alpha * 1e6:.1f} us, bandwidth "
          f"{net.bandwidth / 1e9:.2f} GB/s; 8-byte all_reduce {net_fit['all_reduce_8_bytes'] * 1e6:.1f} us")
    print(f"ping-pong, waiting ranks yield (--wait yield): alpha {yield_fit['alpha'] * 1e6:.1f} us; 8-byte "
          f"all_reduce {yield_fit['all_reduce_8_bytes'] * 1e6:.1f} us")
    print("\ndata parallel, compiled SGD step (global batch: CNN 64, BERT 16; cnn_sync: the CNN with SyncBatchNorm "
          "under DDP), median ms")
    print_table(["model", "1 rank", "2 ranks", "throughput", "in turns: 1 process", "in turns: throughput",
                 "2 ranks without DDP", "buckets", "alpha-beta model",
                 "model error", "model without overlap", "loss drift"], rows)
    choice = {name: {"step_ms": median_of([r[name] for r in runs["bert_buckets@2"]], "step_seconds") * 1e3,
                     "buckets": runs["bert_buckets@2"][0][name]["buckets"]} for name in runs["bert_buckets@2"][0]}
    results["bert_bucket_choice"] = choice
    print("\nsmall BERT on 2 ranks, the steps in turns in one launch, median ms: "
          + "; ".join(f"{name} ({way['buckets']} buckets) {way['step_ms']:.2f}" for name, way in choice.items()))
    paths = {model: {way: median_of([r[model] for r in runs["all_reduce_paths@2"]], way) * 1e6
                     for way in ALL_REDUCE_PATHS} for model in ("cnn", "bert")}
    results["all_reduce_paths_us"] = paths
    print("a compiled all-reduce (mean) of the gradient bucket on 2 ranks, start and wait, in turns, median us: "
          + "; ".join(f"{model} ({runs['all_reduce_paths@2'][0][model]['bytes']} B): "
                      + ", ".join(f"{way} {us:.1f}" for way, us in paths[model].items()) for model in paths))
    print(f"\nPyTorch DDP (gloo), digits CNN, 2 ranks: {torch_two * 1e3:.2f} ms per step; tensorkiln DDP is "
          f"{results['torch_ddp_gloo']['tensorkiln_speedup']:.2f}x faster")
    print_decode(results["gpt2_tensor_parallel_decode"], runs)
    print(f"\npredicted weak scaling on {STATED_NETWORK.name} (compute per step as measured on 1 rank)")
    predictions = {}
    prediction_rows = []
    for ranks in (8, 64, 256, 1024):
        row = [str(ranks)]
        for model in ("cnn", "bert"):
            compute = results[model]["one_rank_step_ms"] / 1e3
            step = predict_data_parallel_step(compute, runs[f"{model}@2"][0]["bucket_bytes"], ranks, STATED_NETWORK)
            predictions.setdefault(model, {})[ranks] = {"step_ms": step.step_seconds * 1e3,
                                                        "efficiency": step.efficiency}
            row += [f"{step.step_seconds * 1e3:.2f}", f"{100 * step.efficiency:.0f}%"]
        row.append(f"{all_reduce_seconds(4 * 124e6, ranks, STATED_NETWORK) * 1e3:.1f}")
        prediction_rows.append(row)
    print_table(["ranks", "CNN step ms", "CNN eff.", "BERT step ms", "BERT eff.", "GPT-2 grads all-reduce ms"],
                prediction_rows)
    results["predictions"] = {"network": STATED_NETWORK.name, **predictions}
    if plot_path:
        plot(predictions, plot_path)
    return results


def model_overlapped_step(ddp_runs: list[dict], net: Network) -> float:
    """The alpha-beta model of a DDP step with overlap: the step on 2 ranks without DDP (timed in turns
    with the DDP step in the same launch), plus the compute DDP adds to it (each bucket's gradients
    copied into one flat vector and the mean read back by the update: the DDP step's kernels less the
    plain step's, both profiled in the same launch), plus the time the model says the all-reduces add to
    the ranks' kernel timelines (each rank's own profile; each start where it runs, after the kernels
    that make its bucket; a wait lasts for the slower rank, and the bytes move at the waits: ranks of
    one thread each, sharing memory, progress MPI only inside its calls)."""
    timelines = [[TimelineEvent("compute", e["seconds"]) if e["kind"] == "compute" else
                  TimelineEvent(e["kind"], key=e["key"], nbytes=e["nbytes"]) for e in events]
                 for events in ddp_runs[0]["timelines"]]
    starts = [e["seconds"] for e in ddp_runs[0]["timeline"] if e["kind"] == "start"]
    call_seconds = float(np.median(starts)) if starts else 0.0  # a start's own cost: the copy, the call
    slowest = max(sum(e.seconds for e in events if e.kind == "compute") for events in timelines)
    added = predict_overlapped_ranks(timelines, net, call_seconds=call_seconds) - slowest
    # the DDP step runs the plain step's kernels and more, so a negative difference of the two profiles
    # is their noise (a small model's kernels vary by more than the flattening adds), not a saving
    bucket_compute = max(0.0, float(np.median([compute_seconds(r["timeline"]) - compute_seconds(r["compute_timeline"])
                                               for r in ddp_runs])))
    return median_of(ddp_runs, "compute_step_seconds") + bucket_compute + added


def compute_seconds(events: list[dict]) -> float:
    """The kernels' time of a profiled step, its collectives' starts and waits left out."""
    return sum(e["seconds"] for e in events if e["kind"] == "compute")


def wait_policy_report(runs: dict[str, list[dict]], rounds: int) -> dict:
    """Print the ping-pong's alpha and beta, and an 8-byte all-reduce, per wait policy (`runs`: the
    policy -> its launches' figures) and return them."""
    rows, results = [], {}
    for wait, found in runs.items():
        alpha, beta = median_of(found, "alpha"), median_of(found, "beta")
        small = median_of(found, "all_reduce_8_bytes")
        results[wait] = {"alpha_us": alpha * 1e6, "bandwidth_GBps": 1 / beta / 1e9,
                         "all_reduce_8_bytes_us": small * 1e6}
        rows.append([wait, f"{alpha * 1e6:.1f}", f"{1 / beta / 1e9:.2f}", f"{small * 1e6:.1f}"])
    print(f"\nping-pong between 2 ranks, median of {rounds} launch(es) per policy")
    print_table(["--wait", "alpha (us)", "bandwidth (GB/s)", "8-byte all_reduce (us)"], rows)
    return results


def plot(predictions: dict, path: str) -> None:
    """The predicted weak-scaling efficiency of each model against the ranks, as an image at `path`."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for model, by_ranks in predictions.items():
        ranks = sorted(by_ranks)
        ax.plot(ranks, [100 * by_ranks[r]["efficiency"] for r in ranks], marker="o", label=model)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("weak-scaling efficiency (%)")
    ax.set_title(f"alpha-beta model, {STATED_NETWORK.name}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")

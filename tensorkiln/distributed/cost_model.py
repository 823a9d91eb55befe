"""The alpha-beta model of communication, and what it predicts for data-parallel training.

A message of n bytes between two ranks takes alpha + n * beta seconds (alpha:
latency, beta: seconds per byte, 1 / bandwidth). All-reduce of n bytes over p
ranks (Thakur, Rabenseifner and Gropp 2005; Patarasuk and Yuan 2009):

- ring (reduce-scatter, then all-gather): 2 (p - 1) alpha + 2 (p - 1) / p * n * beta
  (bandwidth-optimal: each rank sends about 2n bytes whatever p is);
- tree (binomial reduce, then broadcast): 2 ceil(log2 p) (alpha + n * beta)
  (latency-optimal: for small messages and many ranks).

An MPI library picks the faster; so does `all_reduce_seconds`. A data-parallel
step on p ranks with a fixed batch per rank (weak scaling) takes the one-rank
compute time plus the all-reduces of the gradient buckets, when nothing
overlaps them; its efficiency is compute / step. Amdahl's serial fraction
follows from a measured speedup S on p ranks: s = (p / S - 1) / (p - 1).
A pipelined step over p stages and m microbatches idles each stage for a
fraction (p - 1) / (m + p - 1) of it (the bubble).

With overlap (each bucket's all-reduce started as soon as its gradients
exist, waited for only where the update needs it) the step is a timeline
(`predict_overlapped_step`): a start at time t finishes its latency part at
t + alpha terms; its bytes part travels in the background where the MPI
library progresses alone (a progress thread, a network card), or else runs
at the wait, on the rank's own core, as it does between ranks that share
memory and have one thread each. The bucket size that minimizes the exposed
time of B buckets of N bytes in all, N beta / B + B alpha, is sqrt(N alpha /
beta) (`bucket_bytes_for`), never less than alpha / beta, the size at which
a message runs at half the bandwidth; without background progress it is N
beta + B alpha, and one bucket is the best.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Network:
    """alpha (seconds per message) and beta (seconds per byte) of a link."""

    alpha: float
    beta: float
    name: str = ""

    @classmethod
    def from_link(cls, gigabits_per_second: float, latency_us: float, name: str = "") -> "Network":
        """A network stated as bandwidth and latency (e.g. 100 Gb/s, 2 us)."""
        return cls(latency_us * 1e-6, 8 / (gigabits_per_second * 1e9),
                   name or f"{gigabits_per_second:g} Gb/s, {latency_us:g} us")

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return 1 / self.beta

    def message_seconds(self, nbytes: float) -> float:
        return self.alpha + nbytes * self.beta


def fit_alpha_beta(nbytes, seconds, name: str = "measured") -> Network:
    """Least-squares alpha and beta from one-way message times (a ping-pong's round trips halved)."""
    nbytes, seconds = np.asarray(nbytes, float), np.asarray(seconds, float)
    if len(nbytes) < 2 or len(set(nbytes.tolist())) < 2:
        raise ValueError("fitting alpha and beta needs times of at least two message sizes")
    # weigh each point by 1/time so small messages (which set alpha) count as much as large ones
    weights = 1 / seconds
    design = np.stack([np.ones_like(nbytes), nbytes], axis=1) * weights[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, seconds * weights, rcond=None)
    return Network(max(float(alpha), 0.0), max(float(beta), 1e-15), name)


def ring_all_reduce_seconds(nbytes: float, ranks: int, net: Network) -> float:
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * net.alpha + 2 * (ranks - 1) / ranks * nbytes * net.beta


def tree_all_reduce_seconds(nbytes: float, ranks: int, net: Network) -> float:
    if ranks <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(ranks)) * (net.alpha + nbytes * net.beta)


def all_reduce_seconds(nbytes: float, ranks: int, net: Network) -> float:
    """The faster of ring and tree."""
    return min(ring_all_reduce_seconds(nbytes, ranks, net), tree_all_reduce_seconds(nbytes, ranks, net))


@dataclass(frozen=True)
class StepPrediction:
    ranks: int
    compute_seconds: float
    communication_seconds: float

    @property
    def step_seconds(self) -> float:
        return self.compute_seconds + self.communication_seconds

    @property
    def efficiency(self) -> float:
        """Weak-scaling efficiency: the one-rank step over this step."""
        return self.compute_seconds / self.step_seconds


def predict_data_parallel_step(compute_seconds: float, bucket_bytes: list[int], ranks: int,
                               net: Network) -> StepPrediction:
    """A step with a fixed batch per rank: compute, then one all-reduce per gradient bucket (no overlap)."""
    communication = sum(all_reduce_seconds(n, ranks, net) for n in bucket_bytes)
    return StepPrediction(ranks, compute_seconds, communication)


def bucket_bytes_for(total_bytes: float, net: Network, background_progress: bool = True) -> int:
    """The gradient bucket size for `total_bytes` of gradients: sqrt(N alpha / beta), at least alpha / beta
    (half bandwidth), rounded to split N evenly (N itself: one bucket). Without background progress every
    bucket's bytes move at its wait whatever it overlaps, so B buckets expose N beta plus B latencies and
    B pairs of runtime calls: one bucket is the fastest."""
    if not background_progress:
        return max(1, math.ceil(total_bytes))
    half_bandwidth = net.alpha / net.beta
    best = max(math.sqrt(max(total_bytes, 1.0) * half_bandwidth), half_bandwidth)
    count = max(1, round(total_bytes / best))  # whole buckets of even size
    return max(1, math.ceil(total_bytes / count))


@dataclass(frozen=True)
class TimelineEvent:
    """One piece of a compiled step, in the order it runs: a kernel's compute (`seconds`), or the start or
    wait of a collective `key` carrying `nbytes` (all_reduce over `ranks`)."""

    kind: str  # "compute" | "start" | "wait"
    seconds: float = 0.0
    key: str = ""
    nbytes: float = 0.0


def predict_overlapped_step(events: list[TimelineEvent], ranks: int, net: Network,
                            background_progress: bool = False, call_seconds: float = 0.0) -> float:
    """The time of a step whose all-reduces are started and waited for where `events` says.

    A start costs `call_seconds` of the rank's own time (the runtime call) and its latency part,
    the alpha terms of the all-reduce, runs from then on by itself. Its bytes part (the beta terms)
    runs after the previous collective's where the library progresses in the background, else at
    the wait, on the rank's own time. A wait lasts until its collective is done, plus `call_seconds`.
    """
    now, channel_free = 0.0, 0.0
    done: dict[str, tuple[float, float]] = {}  # key -> (when it is done, bytes part left for the wait)
    latency = all_reduce_seconds(0.0, ranks, net)
    for event in events:
        if event.kind == "compute":
            now += event.seconds
            continue
        if event.kind == "start":
            now += call_seconds
            transfer = all_reduce_seconds(event.nbytes, ranks, net) - latency
            if background_progress:
                channel_free = max(now + latency, channel_free) + transfer
                done[event.key] = (channel_free, 0.0)
            else:
                done[event.key] = (now + latency, transfer)
        else:
            finished, left = done.pop(event.key)
            now = max(now, finished) + left + call_seconds
    return now


def predict_overlapped_ranks(timelines: list[list[TimelineEvent]], net: Network,
                             background_progress: bool = False, call_seconds: float = 0.0) -> float:
    """`predict_overlapped_step` with every rank's own timeline (the same collectives, waited for in the
    same order; the kernels' times may differ): a collective's latency part runs from the last rank's
    start and its bytes part, without background progress, once the last rank has reached the wait,
    so a wait also lasts for the slower rank. The step ends when the last rank's ends."""
    ranks = len(timelines)
    latency = all_reduce_seconds(0.0, ranks, net)
    nbytes = {e.key: e.nbytes for events in timelines for e in events if e.kind == "start"}
    now, cursor = [0.0] * ranks, [0] * ranks
    last_start: dict[str, float] = {}
    channel_free = 0.0

    def run_to_wait(r: int) -> str | None:
        """Rank r's compute and starts up to its next wait; that wait's key (None at the end)."""
        events = timelines[r]
        while cursor[r] < len(events):
            event = events[cursor[r]]
            cursor[r] += 1
            if event.kind == "wait":
                return event.key
            now[r] += event.seconds if event.kind == "compute" else call_seconds
            if event.kind == "start":
                last_start[event.key] = max(last_start.get(event.key, 0.0), now[r])
        return None

    while True:
        keys = {run_to_wait(r) for r in range(ranks)}
        if keys == {None}:
            return max(now)
        if len(keys) != 1:
            raise ValueError(f"the ranks wait for different collectives next: {sorted(map(str, keys))}")
        key = keys.pop()
        transfer = all_reduce_seconds(nbytes[key], ranks, net) - latency
        if background_progress:
            channel_free = max(last_start[key] + latency, channel_free) + transfer
            leave = max(max(now), channel_free)
        else:
            leave = max(max(now), last_start[key] + latency) + transfer
        now = [leave + call_seconds] * ranks


def amdahl_serial_fraction(speedup: float, ranks: int) -> float:
    """The serial fraction s with speedup = 1 / (s + (1 - s) / ranks)."""
    if ranks <= 1:
        raise ValueError("Amdahl's serial fraction needs at least two ranks")
    return (ranks / speedup - 1) / (ranks - 1)


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """The share of an ideal pipelined step each stage spends idle (the bubble): (p - 1) / (m + p - 1)."""
    return (stages - 1) / (microbatches + stages - 1)


def predict_pipeline_step(microbatch_seconds: float, stages: int, microbatches: int, activation_bytes: float,
                          net: Network) -> float:
    """A GPipe or 1F1B step: m + p - 1 slots of the slowest stage's forward and backward of one microbatch,
    plus the messages on the critical path (the first microbatch's activation forward through p - 1 links,
    the last one's gradient back through them); the other messages overlap compute."""
    return ((microbatches + stages - 1) * microbatch_seconds
            + 2 * (stages - 1) * net.message_seconds(activation_bytes))

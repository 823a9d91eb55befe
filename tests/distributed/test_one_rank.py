"""tensorkiln.distributed in this process (a world of one rank), and the parts that need no ranks:
the op table's collective entries, the runtime-call path of the C backend, buckets, sampler, launcher."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import nn
from tensorkiln.distributed import launch as launcher
from tensorkiln.distributed.sampler import DistributedSampler
from tensorkiln.ir.ops import REGISTRY
from tensorkiln.nn.parallel.buckets import flatten_arrays, plan_buckets, unflatten_arrays
from tensorkiln.runtime import hooks

from mpi_programs import mpi_missing

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


def test_collectives_are_op_table_entries_with_gradients_and_runtime_calls():
    for name in COLLECTIVES:
        op = REGISTRY[name]
        assert callable(op.gradient) and op.runtime_call is not None, name


@pytest.fixture(scope="module")
def dist():
    if mpi_missing():
        pytest.skip(mpi_missing())
    import tensorkiln.distributed as dist
    dist.init()
    return dist


def test_a_world_of_one(dist):
    assert (dist.rank(), dist.world_size(), dist.is_initialized()) == (0, 1, True)
    dist.barrier()
    rng = np.random.default_rng(0)
    for shape in [(), (1,), (3, 1, 5), (2, 17)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for op in ("sum", "mean", "max", "min", "prod"):
            np.testing.assert_array_equal(dist.all_reduce(tk.tensor(x), op).numpy(), x)
        np.testing.assert_array_equal(dist.broadcast(tk.tensor(x)).numpy(), x)
        if shape:
            np.testing.assert_array_equal(dist.all_gather(tk.tensor(x), dim=-1).numpy(), x)
            np.testing.assert_array_equal(dist.reduce_scatter(tk.tensor(x), dim=0).numpy(), x)


def test_compiled_collective_is_a_runtime_call_in_the_generated_c(dist):
    f = tk.jit(lambda x: dist.all_reduce(x * 2, "mean") + 1)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(f(x), x * 2 + 1)
    report = f.report(x)
    assert report.backend == "c"
    source = open(report.source_path).read()
    assert "tk_set_runtime_hook" in source
    assert re.search(r'tk_runtime_hook\("all_reduce seq=\d+ dtype=float32 in=2,3 out=2,3 group=world '
                     r'reduction=mean( overlap=none)? phase=start", 0, t0\)', source), source
    assert re.search(r'tk_runtime_hook\("all_reduce seq=\d+ [^"]* phase=wait", t1, 0\)', source), source
    assert "mpi" not in source.lower()  # the generated code never links MPI


def test_a_collective_starts_when_its_operand_is_ready_and_is_waited_for_when_read(dist):
    def f(a, b):
        total = dist.all_reduce(a.exp(), "mean")  # its operand is ready first ...
        other = ((b @ b).relu() @ b).sum()         # ... and this does not need it
        return total * 2, other

    compiled = tk.jit(f)
    a, b = np.ones((4, 5), np.float32), np.eye(16, dtype=np.float32)
    total, other = compiled(a, b)
    np.testing.assert_allclose(np.asarray(total), np.exp(a) * 2, rtol=1e-6)
    names = [k.name for k in compiled.report(a, b).kernels]
    start, wait = names.index("k1_all_reduce_start"), names.index("k1_all_reduce_wait")
    assert names[0] == "k0_exp" and start == 1, names
    assert "k4_matmul" in names[start:wait] and names[wait + 1:] == ["k2_mul"], names


def test_gradient_through_collectives_of_one_rank_is_the_identity(dist):
    x = tk.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    y = dist.all_gather(dist.all_reduce(x, "max"), dim=1)
    dist.reduce_scatter(dist.broadcast(y), dim=0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3)))


def test_bad_calls_name_op_shapes_and_line(dist):
    with pytest.raises(tk.DTypeError, match=r"(?s)all_reduce: the mean needs a floating tensor, got tk.int32 \(operands: i32\[3\]\).*test_one_rank.py"):
        dist.all_reduce(tk.tensor(np.arange(3, dtype=np.int32)), "mean")
    with pytest.raises(tk.DTypeError, match="cannot sum booleans"):
        dist.all_reduce(tk.tensor(np.ones(3, bool)))
    with pytest.raises(dist.DistributedError, match="unknown reduction 'median'"):
        dist.all_reduce(tk.ones(2), "median")
    with pytest.raises(tk.ShapeError, match="root 3 is not a rank of the group"):
        dist.broadcast(tk.ones(2), src=3)
    with pytest.raises(dist.DistributedError, match="rank 0 of 1: cannot send to rank 0"):
        dist.send(tk.ones(2), 0)
    with pytest.raises(dist.DistributedError, match="distinct ranks"):
        dist.new_group([0, 0])
    with pytest.raises(dist.DistributedError, match="rank 0 of 1: cannot send to rank 1"):  # compiled, too
        tk.jit(lambda x: dist.send(x, 1))(np.ones(2, np.float32))
    with pytest.raises(dist.DistributedError, match="runs eagerly"):
        tk.jit(lambda x: dist.isend(x, 1))(np.ones(2, np.float32))


def test_data_parallel_on_one_rank_leaves_training_unchanged(dist):
    tk.manual_seed(3)
    model = nn.Linear(4, 3)
    ddp = nn.parallel.DistributedDataParallel(model)
    assert ddp.module is model and list(ddp.state_dict()) == ["module.weight", "module.bias"]
    x = tk.tensor(np.ones((2, 4), np.float32))
    ddp(x).sum().backward()
    np.testing.assert_allclose(model.bias.grad.numpy(), [2.0, 2.0, 2.0])


def test_a_runtime_call_that_fails_raises_its_own_error():
    def broken(what, out, in_):
        raise ValueError(f"broken call {what}")
    hooks.register_handler("test_broken", broken)
    assert hooks._dispatch(b"test_broken x=1", 0, 0) == 1
    with pytest.raises(ValueError, match="broken call test_broken x=1"):
        raise hooks.take_failure()
    assert hooks._dispatch(b"nothing_handles_this", 0, 0) == 1
    assert "nothing here handles" in str(hooks.take_failure())
    assert hooks.take_failure() is None


def test_buckets_hold_one_dtype_up_to_the_cap_in_reverse_order():
    params = [nn.Parameter(np.zeros(n, np.float32)) for n in (10, 20, 30, 5)]
    params.insert(2, nn.Parameter(np.zeros(4, np.float64)))
    buckets = plan_buckets(params, cap_bytes=100)
    assert [[p.numel() for p in b.params] for b in buckets] == [[5], [30], [4], [20], [10]]
    assert all(len({p.dtype for p in b.params}) == 1 for b in buckets)
    big = plan_buckets(params, cap_bytes=10 ** 6)
    assert [[p.numel() for p in b.params] for b in big] == [[5, 30, 20, 10], [4]]
    arrays = [np.arange(6.0).reshape(2, 3), np.arange(1.0), np.arange(4.0).reshape(4, 1)]
    pieces = unflatten_arrays(flatten_arrays(arrays), [a.shape for a in arrays])
    for a, b in zip(arrays, pieces):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("length,replicas,drop_last", [(10, 3, False), (10, 3, True), (1, 4, False), (8, 2, False)])
def test_sampler_shares_are_equal_and_cover_the_dataset(length, replicas, drop_last):
    shares = [DistributedSampler(length, replicas, r, seed=5, drop_last=drop_last) for r in range(replicas)]
    indices = [s.indices() for s in shares]
    assert len({len(i) for i in indices}) == 1 and all(len(s) == len(i) for s, i in zip(shares, indices))
    union = np.concatenate(indices)
    if drop_last:
        assert len(set(union.tolist())) == len(union) == length // replicas * replicas
    else:
        assert set(union.tolist()) == set(range(length))
    shares[0].set_epoch(1)
    again = DistributedSampler(length, replicas, 0, seed=5, drop_last=drop_last)
    again.set_epoch(1)
    assert list(shares[0]) == list(again)  # every rank draws the same permutation for an epoch
    with pytest.raises(ValueError, match="rank 5 is not in"):
        DistributedSampler(length, replicas, 5)


def test_launch_plan(tmp_path):
    plan = launcher.plan(3, ["train.py", "--steps", "2"], threads=2, log_dir=str(tmp_path / "logs"), timeout=30,
                         mpiexec="/opt/mpi/bin/mpiexec", cores=2, busy=0)
    assert plan.command[1:3] == ["-n", "3"] and plan.command[-3:] == ["train.py", "--steps", "2"]
    assert plan.environment["OMP_NUM_THREADS"] == "2" and plan.environment["MPIEXEC_TIMEOUT"] == "30"
    assert len(plan.output) == 3 and str(tmp_path / "logs") in plan.output[2]
    # 3 ranks x 2 threads on 2 cores: a waiting rank yields its core (unless the user's setting says otherwise)
    assert plan.environment["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    spinning = launcher.plan(2, ["train.py"], mpiexec="/opt/mpi/bin/mpiexec", busy_poll=True)
    assert spinning.wait.policy == "spin"
    assert spinning.environment.get("MPIR_CVAR_ENABLE_HEAVY_YIELD") == os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD",
                                                                                      "0")
    with pytest.raises(ValueError, match="at least one rank"):
        launcher.plan(0, ["train.py"], mpiexec="mpiexec")


@pytest.mark.parametrize("root", [True, False])
def test_launch_plan_lets_open_mpi_run_as_root(tmp_path, monkeypatch, root):
    fake = tmp_path / "mpiexec"
    fake.write_text("#!/bin/sh\necho 'mpiexec (Open MPI) 4.1.6'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT", raising=False)
    monkeypatch.delenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", raising=False)
    plan = launcher.plan(2, ["train.py"], mpiexec=str(fake))
    assert "--tag-output" in plan.command  # read as Open MPI
    allowed = {k: plan.environment.get(k) for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")}
    assert allowed == ({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"} if root
                       else {"OMPI_ALLOW_RUN_AS_ROOT": None, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": None})
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "0")  # the user's own setting wins
    assert launcher.plan(2, ["train.py"], mpiexec=str(fake)).environment["OMPI_ALLOW_RUN_AS_ROOT"] == "0"


def test_launch_plan_runs_the_tensorkiln_command_after_a_double_dash():
    plan = launcher.plan(2, ["--", "tensorkiln", "md", "in.lj"], mpiexec="/opt/mpi/bin/mpiexec")
    assert plan.command[-5:] == [sys.executable, "-m", "tensorkiln.tools.cli", "md", "in.lj"]
    assert launcher.plan(2, ["--", "train.py"], mpiexec="/opt/mpi/bin/mpiexec").command[-2:] == [sys.executable,
                                                                                                 "train.py"]
    with pytest.raises(ValueError, match="needs a program"):
        launcher.plan(2, ["--"], mpiexec="mpiexec")


def test_sync_batch_norm_on_one_rank_is_batch_norm():
    tk.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3, momentum=None))
    tk.manual_seed(0)
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3, momentum=None)))
    assert isinstance(synced[1], nn.SyncBatchNorm) and synced[1].momentum is None
    x = tk.tensor(np.random.default_rng(0).standard_normal((4, 2, 6, 6)).astype(np.float32))
    for _ in range(2):
        np.testing.assert_allclose(synced(x).numpy(), plain(x).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(synced[1].running_var.numpy(), plain[1].running_var.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="expects an"):
        nn.SyncBatchNorm(3)(tk.tensor(np.ones(3, np.float32)))

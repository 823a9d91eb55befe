"""How launched ranks wait for messages: spin when every thread has a core, yield when oversubscribed."""
import os

import pytest

from tensorkiln.distributed import launch as launcher
from tensorkiln.distributed.wait_policy import busy_threads, choose_wait_policy, wait_environment
from tensorkiln.tools import launch as launch_cli

MPIEXEC = "/opt/mpi/bin/mpiexec"  # plan() only builds the command: the path need not exist


@pytest.mark.parametrize("ranks, threads, cores, policy", [
    (2, 1, 2, "spin"), (1, 2, 2, "spin"), (2, 2, 4, "spin"), (1, 1, 1, "spin"),
    (3, 1, 2, "yield"), (2, 2, 2, "yield"), (2, 1, 1, "yield"), (4, 4, 15, "yield")])
def test_auto_spins_exactly_when_ranks_times_threads_fit_the_cores(ranks, threads, cores, policy):
    choice = choose_wait_policy(ranks, threads, "auto", cores, busy=0)
    assert choice.policy == policy
    assert f"{ranks} rank(s) x {threads} thread(s)" in choice.reason and f"{cores} core(s)" in choice.reason


@pytest.mark.parametrize("ranks, threads, cores, busy, policy", [
    (2, 1, 2, 1, "yield"), (2, 1, 4, 2, "spin"), (2, 1, 4, 3, "yield"), (1, 1, 2, 1, "spin"), (1, 1, 2, 12, "yield")])
def test_threads_of_other_work_take_cores_away(ranks, threads, cores, busy, policy):
    choice = choose_wait_policy(ranks, threads, "auto", cores, busy)
    assert choice.policy == policy and f"{busy} busy with other work" in choice.reason


def test_busy_threads_counts_other_runnable_threads():
    count = busy_threads(samples=3, interval=0.001)
    assert isinstance(count, int) and count >= 0
    if os.path.exists("/proc/loadavg"):
        assert count <= int(open("/proc/loadavg").read().split()[3].split("/")[1])  # at most every thread


@pytest.mark.parametrize("requested", ["spin", "yield"])
def test_a_requested_policy_wins_over_the_core_count(requested):
    for cores in (1, 64):
        assert choose_wait_policy(8, 2, requested, cores).policy == requested


def test_an_unknown_policy_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="unknown wait policy 'nap'.*auto, spin, yield"):
        choose_wait_policy(2, 1, "nap", 2)


def test_each_policy_sets_the_mpi_variables_of_its_library():
    assert wait_environment("yield", "mpich") == {"MPIR_CVAR_POLLS_BEFORE_YIELD": "100",
                                                  "MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}
    assert wait_environment("spin", "mpich") == {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "0"}
    assert wait_environment("spin", "openmpi") == {"OMPI_MCA_mpi_yield_when_idle": "0"}
    assert wait_environment("yield", "openmpi") == {"OMPI_MCA_mpi_yield_when_idle": "1"}


def test_the_launch_plan_carries_the_choice_into_the_ranks_environment(monkeypatch):
    monkeypatch.delenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", raising=False)
    monkeypatch.delenv("MPIR_CVAR_POLLS_BEFORE_YIELD", raising=False)
    fits = launcher.plan(2, ["train.py"], threads=1, mpiexec=MPIEXEC, cores=2, busy=0)
    assert fits.wait.policy == "spin" and fits.environment["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "0"
    crowded = launcher.plan(2, ["train.py"], threads=2, mpiexec=MPIEXEC, cores=2, busy=0)
    assert crowded.wait.policy == "yield" and crowded.environment["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"
    forced = launcher.plan(2, ["train.py"], threads=2, mpiexec=MPIEXEC, cores=2, wait="spin")
    assert forced.wait.policy == "spin" and forced.environment["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "0"
    assert launcher.plan(2, ["train.py"], mpiexec=MPIEXEC, cores=1, busy_poll=True).wait.policy == "spin"


def test_a_setting_exported_by_the_user_wins(monkeypatch):
    monkeypatch.setenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
    plan = launcher.plan(2, ["train.py"], threads=1, mpiexec=MPIEXEC, cores=2, busy=0)
    assert plan.wait.policy == "spin" and plan.environment["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"


def test_the_auto_choice_counts_the_cores_this_process_may_use():
    cores = len(os.sched_getaffinity(0))
    assert launcher.plan(cores, ["train.py"], mpiexec=MPIEXEC, busy=0).wait.policy == "spin"
    assert launcher.plan(cores + 1, ["train.py"], mpiexec=MPIEXEC, busy=0).wait.policy == "yield"


def test_launch_help_names_the_policies(capsys):
    with pytest.raises(SystemExit):
        launch_cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--wait {auto,spin,yield}" in text and "auto (default) spins when ranks x threads <=" in text
    assert "less those other work keeps busy now" in text


def test_background_progress_only_with_mpichs_progress_thread():
    from tensorkiln.distributed.wait_policy import progresses_in_background
    assert not progresses_in_background({})
    assert not progresses_in_background({"MPIR_CVAR_ASYNC_PROGRESS": "0"})
    assert progresses_in_background({"MPIR_CVAR_ASYNC_PROGRESS": "1"})

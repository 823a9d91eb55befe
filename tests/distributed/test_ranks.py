"""2- and 4-rank runs through `tensorkiln launch` (mpiexec), each under a timeout.

The programs (programs/*.py) check their own results on every rank against numpy
or a one-process run; here each launch must succeed and every rank report OK.
"""
from __future__ import annotations

import time

from mpi_programs import assert_ok, launch, needs_mpi

pytestmark = needs_mpi


def test_collectives_eager_compiled_and_gradients_on_two_ranks():
    result = launch(2, "collectives.py")
    assert_ok(result, "collectives", 2)
    # the launcher said where each rank's output goes
    assert "2 rank(s), 1 OpenMP thread(s) each" in result.stdout
    assert "rank 1: this terminal, lines prefixed [1]" in result.stdout


def test_collectives_on_three_ranks():
    assert_ok(launch(3, "collectives.py"), "collectives", 3)


def test_subgroups_and_point_to_point_on_four_ranks():
    assert_ok(launch(4, "groups_and_messages.py"), "groups_and_messages", 4)


def test_data_parallel_training_matches_one_process():
    assert_ok(launch(2, "data_parallel.py"), "data_parallel", 2)


def test_send_and_recv_inside_compiled_functions_keep_their_order():
    assert_ok(launch(2, "compiled_messages.py"), "compiled_messages", 2)


def test_sync_batch_norm_and_no_sync_match_one_process():
    assert_ok(launch(2, "sync_batch_norm.py"), "sync_batch_norm", 2)


def test_tensor_parallel_gpt2_and_bert_match_the_unsharded_models():
    assert_ok(launch(2, "tensor_parallel.py"), "tensor_parallel", 2)


def test_ranks_that_disagree_all_get_an_error_naming_them():
    assert_ok(launch(2, "failures.py", "disagree"), "failures", 2)


def test_an_uncaught_exception_ends_every_rank():
    start = time.monotonic()
    result = launch(2, "failures.py", "crash", timeout=60)
    assert result.returncode != 0
    assert "rank 1 of 2 failed; aborting all ranks" in result.stderr
    assert "boom on purpose" in result.stderr
    assert "passed a barrier" not in result.stdout
    assert time.monotonic() - start < 50  # ended by the abort, not by the timeout



def test_compiled_collectives_through_channels_and_the_general_path_match_numpy():
    assert_ok(launch(2, "channels.py"), "channels", 2)


def test_compiled_collectives_through_channels_on_three_ranks():
    assert_ok(launch(3, "channels.py"), "channels", 3)  # shared memory in three parts of odd sizes


def test_short_all_reduces_run_in_c_from_the_runtime_hook():
    assert_ok(launch(2, "native_all_reduce.py"), "native_all_reduce", 2)

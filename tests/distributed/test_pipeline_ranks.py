"""Pipeline parallelism on 2, 3 and 4 ranks through `tensorkiln launch`, each launch under a timeout.

programs/pipeline_parallel.py checks its own results on every rank against one process
training the whole model on the whole batch.
"""
from __future__ import annotations

from mpi_programs import assert_ok, launch, needs_mpi

pytestmark = needs_mpi


def test_gpipe_and_1f1b_on_two_stages_match_one_process():
    assert_ok(launch(2, "pipeline_parallel.py", "train"), "pipeline_parallel", 2)


def test_three_stages_pass_activations_and_gradients_through_the_middle_one():
    assert_ok(launch(3, "pipeline_parallel.py", "three_stages"), "pipeline_parallel", 3)


def test_two_pipelines_of_two_stages_with_data_parallel_replicas():
    assert_ok(launch(4, "pipeline_parallel.py", "data_parallel"), "pipeline_parallel", 4)


def test_a_stage_that_does_not_fit_its_input_names_both_stages():
    result = launch(2, "pipeline_parallel.py", "mismatch", timeout=60)
    assert result.returncode != 0
    assert ("ShapeError: pipeline stage 1 of 2 (rank 1): the activation of microbatch 0 received from stage 0 "
            "(rank 0), shape [2, 8] float32, does not fit this stage: matmul") in result.stderr, result.stderr[-3000:]
    assert "pipeline_parallel.py:" in result.stderr  # the user's line
    assert "the mismatched pipeline ran" not in result.stdout

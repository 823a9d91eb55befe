"""Run on 2 ranks. `disagree`: ranks that call a collective differently all get an error naming them
(eagerly and from compiled code), then go on. `crash`: rank 1 raises while rank 0 waits; every rank ends."""
import sys

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist

dist.init()
RANK = dist.rank()


def expect_disagreement(what, call):
    try:
        call()
    except dist.DistributedError as err:
        text = str(err)
        assert f"rank {RANK} of 2" in text and "rank 0:" in text and "rank 1:" in text, text
        assert "failures.py:" in text, text  # the user's line
        return
    raise AssertionError(f"rank {RANK}: {what} should have failed")


if sys.argv[1] == "disagree":
    shape = (3,) if RANK == 0 else (4,)
    expect_disagreement("eager shapes", lambda: dist.all_reduce(tk.ones(*shape)))
    expect_disagreement("eager reductions", lambda: dist.all_reduce(tk.ones(2), "sum" if RANK else "max"))
    compiled = tk.jit(lambda x: dist.all_reduce(x + 1))
    expect_disagreement("compiled shapes", lambda: compiled(np.ones(shape, np.float32)))
    assert compiled.report(np.ones(shape, np.float32)).backend == "c"
    # the ranks still agree on what comes next
    total = dist.all_reduce(tk.ones(2) * (RANK + 1)).numpy()
    assert total.tolist() == [3.0, 3.0], total
    print(f"OK failures rank {RANK}")
elif sys.argv[1] == "crash":
    if RANK == 1:
        raise ValueError("boom on purpose")
    dist.barrier()  # never returns: rank 1 is gone; the abort ends this rank too
    print("rank 0 passed a barrier that rank 1 never reached")

"""Run on 2+ ranks: every collective, eager and compiled, with gradients, against numpy.

Each rank builds every rank's input from a seed, so it can compute the expected
result locally. Prints 'OK collectives' on success; any failure aborts every rank.
"""
import warnings

import numpy as np

import tensorkiln as tk
import tensorkiln.distributed as dist

warnings.simplefilter("error")  # a compiled graph must not fall back to the interpreter
dist.init()
RANK, SIZE = dist.rank(), dist.world_size()

SHAPES = [(1,), (7,), (3, 1, 5), (2, 17), (1, 1), (4, 33)]  # size-1 dims, odd sizes, tails past a vector
DTYPES = [np.float32, np.float64, np.int32]


def value(rank: int, shape, dtype, salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + salt)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def everyone(shape, dtype, salt=0):
    return [value(r, shape, dtype, salt) for r in range(SIZE)]


def check(what: str, got, want, rtol=1e-6) -> None:
    got = got.numpy() if isinstance(got, tk.Tensor) else np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=rtol):
        raise AssertionError(f"rank {RANK}: {what}: got {got.shape} {got.ravel()[:6]}, "
                             f"want {want.shape} {want.ravel()[:6]}")


REDUCE = {"sum": lambda xs: np.sum(xs, axis=0), "max": lambda xs: np.max(xs, axis=0),
          "min": lambda xs: np.min(xs, axis=0), "mean": lambda xs: np.mean(xs, axis=0)}


def eager_collectives():
    for salt, shape in enumerate(SHAPES):
        for dtype in DTYPES:
            xs = everyone(shape, dtype, salt)
            mine = tk.tensor(xs[RANK])
            for op, fn in REDUCE.items():
                if op == "mean" and dtype == np.int32:
                    continue
                check(f"all_reduce {op} {shape} {dtype.__name__}", dist.all_reduce(mine, op), fn(np.stack(xs)))
            scalar = tk.tensor(xs[RANK].reshape(-1)[0])  # a 0-d tensor
            check(f"all_reduce 0-d {dtype.__name__}", dist.all_reduce(scalar),
                  np.sum([x.reshape(-1)[0] for x in xs]).astype(dtype))
            for axis in range(len(shape)):
                check(f"all_gather {shape} axis {axis}", dist.all_gather(mine, dim=axis),
                      np.concatenate(xs, axis=axis))
            check(f"broadcast {shape}", dist.broadcast(mine, src=SIZE - 1), xs[SIZE - 1])
            for axis, length in enumerate(shape):
                if length % SIZE == 0:
                    total = np.sum(np.stack(xs), axis=0)
                    want = np.split(total, SIZE, axis=axis)[RANK]
                    check(f"reduce_scatter {shape} axis {axis}", dist.reduce_scatter(mine, dim=axis), want)
    # bfloat16 travels as float32 and is rounded after, as every bfloat16 op
    xs = everyone((5, 3), np.float32, 99)
    got = dist.all_reduce(tk.tensor(xs[RANK]).to(tk.bfloat16))
    want = np.sum([tk.tensor(x).to(tk.bfloat16).float().numpy() for x in xs], axis=0)
    check("all_reduce bfloat16", got.float(), want, rtol=1e-2)


def compiled_collectives():
    xs = everyone((3, 1, 5), np.float32, 7)
    # the operand is a computed, reshaped value; the result feeds more arithmetic: kernels around the call
    fns = {
        "all_reduce": (lambda x: dist.all_reduce((x * 2).reshape(5, 3), "mean").exp(),
                       np.exp(np.mean(np.stack(xs) * 2, axis=0).reshape(5, 3))),
        "all_gather": (lambda x: dist.all_gather(x + 1, dim=2) * 3, np.concatenate(xs, axis=2) * 3 + 3),
        "broadcast": (lambda x: dist.broadcast(x.relu(), src=0) - 1, np.maximum(xs[0], 0) - 1),
        "reduce_scatter": (lambda x: dist.reduce_scatter(x.reshape(15).expand(SIZE, 15), dim=0),
                           np.sum(np.stack(xs), axis=0).reshape(1, 15)),
    }
    for name, (fn, want) in fns.items():
        compiled = tk.jit(fn)
        check(f"compiled {name}", compiled(xs[RANK]), want, rtol=1e-5)
        if compiled.report(xs[RANK]).backend != "c":
            raise AssertionError(f"rank {RANK}: {name} did not compile to C")


def gradients():
    xs = everyone((2, 3), np.float64, 11)
    weights = everyone((2, 3), np.float64, 12)  # each rank's loss weights the result differently
    stacked_w = np.stack(weights)

    def grad_of(collective, x, weight=weights[RANK]):
        x = tk.tensor(x, requires_grad=True)
        (collective(x) * tk.tensor(weight)).sum().backward()
        return x.grad

    # sum: every rank's result is the total, so d(sum_r w_r . total)/dx = sum_r w_r
    check("grad all_reduce sum", grad_of(lambda x: dist.all_reduce(x), xs[RANK]), stacked_w.sum(0))
    check("grad all_reduce mean", grad_of(lambda x: dist.all_reduce(x, "mean"), xs[RANK]), stacked_w.mean(0))
    is_max = np.stack(xs).argmax(0) == RANK
    check("grad all_reduce max", grad_of(lambda x: dist.all_reduce(x, "max"), xs[RANK]),
          np.where(is_max, stacked_w.sum(0), 0.0))
    check("grad broadcast", grad_of(lambda x: dist.broadcast(x, src=0), xs[RANK]),
          stacked_w.sum(0) * (RANK == 0))
    # all_gather along axis 1: rank r's block of every rank's result is x_r
    tiled = np.stack([np.tile(w, (1, SIZE)) for w in weights])
    block = slice(3 * RANK, 3 * RANK + 3)
    check("grad all_gather", grad_of(lambda x: dist.all_gather(x, dim=1), xs[RANK], tiled[RANK]),
          tiled.sum(0)[:, block])
    # reduce_scatter's gradient is all_gather of the gradients (compiled: forward and backward in one graph)
    y = everyone((2 * SIZE, 3), np.float32, 13)

    def loss(x):
        return (dist.reduce_scatter(x, dim=0) * tk.tensor(weights[RANK].astype(np.float32))).sum()

    got = tk.jit(tk.grad(loss))(y[RANK])
    check("compiled grad reduce_scatter", got, np.concatenate([w.astype(np.float32) for w in weights], 0))


eager_collectives()
compiled_collectives()
gradients()
dist.barrier()
print(f"OK collectives rank {RANK}")

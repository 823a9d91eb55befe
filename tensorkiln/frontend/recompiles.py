"""What made tk.jit compile again: the difference between two call signatures, in words.

A signature (jit.py's cache key) is the tensor arguments' shapes and dtypes, the
values of the other arguments, the gradient mode and a module's training flag.
When a function keeps compiling, its RecompileWarning names the argument and the
dimension that changed, so the user knows what to hold fixed or mark dynamic.
"""
from __future__ import annotations


class RecompileWarning(UserWarning):
    """A tk.jit function compiled more programs than its recompile_limit."""


def describe_change(old: tuple, new: tuple, names: list[str]) -> str:
    """The differences between signature keys `old` and `new`; `names` are the tensor leaves' names."""
    old_tensors, old_static, old_grad, old_training = old
    new_tensors, new_static, new_grad, new_training = new
    changes: list[str] = []
    if len(old_tensors) != len(new_tensors):
        changes.append(f"the call passes {len(new_tensors)} tensors instead of {len(old_tensors)}")
    else:
        for name, (old_shape, old_dtype), (new_shape, new_dtype) in zip(names, old_tensors, new_tensors):
            if old_dtype != new_dtype:
                changes.append(f"argument '{name}' dtype {old_dtype} -> {new_dtype}")
            if len(old_shape) != len(new_shape):
                changes.append(f"argument '{name}' shape {list(old_shape)} -> {list(new_shape)}")
                continue
            changes += [f"argument '{name}' dimension {axis}: {a} -> {b}"
                        for axis, (a, b) in enumerate(zip(old_shape, new_shape)) if a != b]
    if old_static != new_static:
        changes.append("a non-tensor argument has a new value (pass values that change from call to call "
                       "as tensors)")
    if old_grad != new_grad:
        changes.append("gradient mode changed (tk.no_grad / enable_grad)")
    if old_training != new_training:
        changes.append("the module switched between train() and eval()")
    return "; ".join(changes) or "the same signature with other parameter values or .grad states"


def closest(new: tuple, keys: list[tuple]) -> tuple:
    """The key among `keys` that differs from `new` in the fewest places (what the call was 'almost');
    of equally close ones, the first."""
    def distance(key: tuple) -> int:
        tensors, static, grad, training = key
        same_count = len(tensors) == len(new[0])
        differences = 0 if same_count else 100
        if same_count:
            for (shape, dtype), (new_shape, new_dtype) in zip(tensors, new[0]):
                differences += (dtype != new_dtype) + (len(shape) != len(new_shape)) + \
                    sum(a != b for a, b in zip(shape, new_shape))
        return differences + (static != new[1]) + (grad != new[2]) + (training != new[3])
    return min(keys, key=distance)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

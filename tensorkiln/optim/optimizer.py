"""Optimizer: parameter groups, per-parameter state, zero_grad, state_dict (PyTorch's layout)."""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..frontend.tensor import Tensor, as_tensor
from ..frontend.trace import mark_mutable


class ParamGroup(dict):
    """A parameter group (a dict, as in PyTorch). Its learning rate is mirrored in a 0-d tensor
    that compiled training steps read as an input, so a scheduler's change reaches compiled code."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lr_tensor = Tensor._from_value(np.asarray(self.get("lr", 0.0), np.float64), dt.float64)
        mark_mutable(self.lr_tensor)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if key == "lr":
            self.lr_tensor._value = np.asarray(value, np.float64)

    def lr_as(self, dtype):
        """The learning rate as a 0-d tensor of `dtype`."""
        return self.lr_tensor.to(dtype)


class Optimizer:
    """Base class: holds param_groups (dicts with 'params' and hyperparameters) and per-parameter state."""

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.state: dict[int, dict] = {}  # id(param) -> state (params are kept alive by param_groups)
        self.param_groups: list[ParamGroup] = []
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters with its own hyperparameters (missing ones from the defaults)."""
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise ValueError("optimizers can only optimize tensors that require grad")
        merged = dict(self.defaults)
        merged.update(group)
        merged["params"] = params
        self.param_groups.append(ParamGroup(merged))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (to None, or to zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.data = p.grad.detach() * 0

    def step(self, closure=None):
        raise NotImplementedError

    def _params_with_grad(self, group):
        return [p for p in group["params"] if p.grad is not None]

    def _state_tensor(self, p, name: str, like=None, value: float = 0.0, dtype=None) -> Tensor:
        """The state tensor `name` of parameter p, created as a constant the first time."""
        state = self.state.setdefault(id(p), {})
        if name not in state:
            shape = tuple(like.shape) if like is not None else ()
            dtype = dtype or (like.dtype if like is not None else dt.float32)
            state[name] = Tensor._from_value(dt.to_storage(np.full(shape, value), dtype), dtype)
            mark_mutable(state[name])  # updated every step: a compiled step reads it as an input
        return state[name]

    # ---- state_dict ------------------------------------------------------------------
    def _param_order(self) -> list:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict:
        """{'state': {index: {name: array}}, 'param_groups': [{hyperparameters, 'params': [index]}]}."""
        index = {id(p): i for i, p in enumerate(self._param_order())}
        state = {index[key]: {k: (v.numpy().copy() if isinstance(v, Tensor) else v) for k, v in s.items()}
                 for key, s in self.state.items() if key in index}
        groups = []
        for group in self.param_groups:
            g = {k: v for k, v in group.items() if k != "params"}
            g["params"] = [index[id(p)] for p in group["params"]]
            groups.append(g)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyperparameters and state saved by state_dict() (of this or a PyTorch optimizer)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
                len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)):
            raise ValueError("loaded state dict has a different number of parameter groups or parameters")
        order = self._param_order()
        for saved, group in zip(groups, self.param_groups):
            for k, v in saved.items():
                if k != "params":
                    group[k] = v
        self.state = {}
        for i, entries in state_dict["state"].items():
            p = order[int(i)]
            state = {}
            for k, v in entries.items():
                if isinstance(v, (Tensor, np.ndarray)) or k == "step":
                    dtype = p.dtype if np.ndim(v) and k != "step" else dt.float32
                    value = np.array(v.numpy() if isinstance(v, Tensor) else v, dtype=np.float64)
                    state[k] = as_tensor(value, dtype)
                    mark_mutable(state[k])
                else:
                    state[k] = v
            self.state[id(p)] = state

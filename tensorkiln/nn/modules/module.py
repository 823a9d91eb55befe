"""Module and Parameter: PyTorch's containers for parameters, buffers and submodules.

Parameter and buffer names and state_dict keys follow PyTorch (`0.weight`,
`bn.running_mean`, `bn.num_batches_tracked`), so a PyTorch state_dict
converted to numpy arrays loads with load_state_dict.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Iterator

import numpy as np

from ... import dtypes as dt
from ...frontend.autodiff.mode import no_grad
from ...frontend.tensor import Tensor, as_tensor
from ...frontend.trace import mark_buffer

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter(Tensor):
    """A Tensor that is a module's parameter: requires grad by default, listed by Module.parameters()."""

    __slots__ = ()

    def __init__(self, data=None, requires_grad: bool = True):
        t = as_tensor(np.zeros(0, np.float32) if data is None else data)
        if t.is_traced:
            raise TypeError("a Parameter needs an eager value")
        self._value, self._dtype, self._node, self._trace = t._value, t._dtype, None, None
        self._grad, self._grad_fn, self._requires_grad = None, None, False
        self.requires_grad_(requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class of layers: assign Parameters, Modules and buffers as attributes; define forward()."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- attributes -------------------------------------------------------------------
    def __setattr__(self, name: str, value) -> None:
        params, buffers, modules = (self.__dict__.get(k) for k in ("_parameters", "_buffers", "_modules"))
        if params is None:
            raise AttributeError("call Module.__init__() before assigning attributes")
        if isinstance(value, Parameter):
            self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            self._forget(name)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} to parameter {name!r} "
                                "(use tk.nn.Parameter, or None)")
            params[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign a {type(value).__name__} to buffer {name!r}")
            if value is not None:
                mark_buffer(value)
            buffers[name] = value
        elif name in modules:
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} to submodule {name!r}")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str):
        for table in ("_parameters", "_buffers", "_modules"):
            values = self.__dict__.get(table)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if any(name in t for t in (self._parameters, self._buffers, self._modules)):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that is state but not a parameter (BatchNorm's running statistics)."""
        self._forget(name)
        if tensor is not None:
            mark_buffer(tensor)  # a compiled function that reads it as a constant is retraced when it changes
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._forget(name)
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module | None") -> None:
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # ---- traversal ----------------------------------------------------------------------
    def named_modules(self, memo=None, prefix: str = "") -> Iterator[tuple[str, "Module"]]:
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        for name, module in self._modules.items():
            if module is not None:
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, module in self.named_children():
            yield module

    def _named(self, table: str, prefix: str, recurse: bool):
        seen = set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        yield from self._named("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---- modes ---------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout active, batch norm uses batch statistics); returns self."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.data = p.grad.detach() * 0

    def apply(self, fn) -> "Module":
        """Call fn on every submodule (children first) and on self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, dtype) -> "Module":
        """Cast floating parameters and buffers to `dtype` in place (they keep their identity)."""
        dtype = dt.as_dtype(dtype)
        with no_grad():
            for t in list(self.parameters()) + list(self.buffers()):
                if t.dtype.is_floating and t.dtype != dtype:
                    t._value, t._dtype = t.to(dtype)._value, dtype
                    if t._grad is not None:
                        t._grad = t._grad.to(dtype)
        return self

    def float(self) -> "Module":
        return self.to(dt.float32)

    def double(self) -> "Module":
        return self.to(dt.float64)

    def half(self) -> "Module":
        return self.to(dt.float16)

    # ---- state_dict ------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by PyTorch's dotted names (detached tensors)."""
        result = OrderedDict()
        for module_prefix, module in self.named_modules(prefix=prefix.rstrip(".")):
            base = f"{module_prefix}." if module_prefix else ""
            for name, p in module._parameters.items():
                if p is not None:
                    result[base + name] = p if keep_vars else p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    result[base + name] = b
        return result

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values (tensors or numpy arrays) into the parameters and buffers in place."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        with no_grad():
            for key, target in own.items():
                if key not in state_dict:
                    continue
                value = state_dict[key]
                array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
                if tuple(array.shape) != tuple(target.shape):
                    raise ValueError(f"load_state_dict: {key} has shape {list(array.shape)}, "
                                     f"the module expects {list(target.shape)}")
                target._value = as_tensor(np.array(array), target.dtype)._value
        return IncompatibleKeys(missing, unexpected)

    # ---- calling ---------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"

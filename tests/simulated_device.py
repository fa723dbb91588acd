"""A simulated accelerator for CPU tests: device mixing fails here as it fails on a GPU.

On a CPU-only machine every tensor lives on the one device, so code that builds a tensor on the CPU
next to a model output (`torch.tensor(...)` without `device=`, `torch.arange(T)` added to
activations, a batch never moved to the model) runs fine in CI and crashes on the first GPU. This
module gives CPU tests a second device:

- `DeviceTensor`: a CPU tensor that reports `device("meta")`. Its data is real (held in `.elem`), so
  models compute exact numbers on it, `.item()` and `.tolist()` work, and results can be compared
  with a plain CPU run.
- Inside `simulated_device()`, every request for the meta device (`.to("meta")`, `model.to(device)`,
  `torch.zeros(..., device=device)`) makes a `DeviceTensor`, and every operation runs on the
  unwrapped data after a placement check with CUDA's rules: all tensor arguments on one device,
  except 0-dim CPU tensors in pointwise operations (CUDA treats them as scalars), CPU index tensors
  in indexing, and the explicit cross-device copies (`.to`, `copy_`). Anything else raises
  "Expected all tensors to be on the same device", as CUDA does. `.numpy()` of a device tensor
  raises too.
- `simulated_accelerator()` also makes `accelerate.Accelerator` place models and batches on that
  device, so a whole training loop runs with the model on the "accelerator" and the data loader on
  the CPU.

Slow (every op goes through Python): for tiny models only.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("meta")
_CPU = torch.device("cpu")
aten = torch.ops.aten

# explicit moves between devices: allowed to mix by definition
_CROSS_DEVICE = {aten._to_copy.default, aten.copy_.default, aten.copy.default}
# CUDA accepts CPU index tensors (and 0-dim CPU values) in advanced indexing
_INDEXING = {
    aten.index.Tensor,
    aten.index_put.default,
    aten.index_put_.default,
    aten._index_put_impl_.default,
}


class DeviceTensor(torch.Tensor):
    """A tensor on the simulated device: real CPU data in `.elem`, `.device` is `meta`."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool | None = None):
        if isinstance(elem, DeviceTensor):
            raise TypeError("DeviceTensor of a DeviceTensor")
        requires_grad = elem.requires_grad if requires_grad is None else requires_grad
        elem = elem.detach() if elem.requires_grad else elem  # autograd runs on the wrapper
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.shape,
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device=DEVICE,
            requires_grad=requires_grad,
        )
        out.elem = elem
        return out

    def __repr__(self) -> str:
        return f"DeviceTensor({self.elem!r})"

    # a traceable wrapper subclass: nn.Module.to() swaps parameters in place (their identity, and so
    # the optimizer's references, survive the move), as a real device move keeps them
    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return DeviceTensor(inner["elem"])

    def __reduce_ex__(self, protocol):
        # torch.save of a GPU tensor stores its data; here, the CPU data (as if loaded with map_location="cpu")
        return self.elem.__reduce_ex__(protocol)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("DeviceTensor used outside simulated_device()")


def _is_device_request(x) -> bool:
    return (isinstance(x, torch.device) and x.type == "meta") or (isinstance(x, str) and x.startswith("meta"))


def _mixing_error(func, plain: list[torch.Tensor]) -> RuntimeError:
    shapes = ", ".join(str(tuple(t.shape)) for t in plain)
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, meta (the simulated "
        f"accelerator) and cpu! (in {func}; CPU tensors of shape {shapes})"
    )


class _Functions(TorchFunctionMode):
    """Route requests for the simulated device to the CPU and wrap what they make."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.device, torch._C._nn._parse_to):  # they only describe devices
            return func(*args, **kwargs)
        if func in (torch.Tensor.tolist, torch.Tensor.item) and isinstance(args[0], DeviceTensor):
            return func(args[0].elem)  # a copy to the host, as on a GPU
        if func is torch.Tensor.numpy and isinstance(args[0], DeviceTensor):
            raise TypeError(
                "can't convert meta (simulated accelerator) device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        requested = False

        def to_cpu(x):
            nonlocal requested
            if _is_device_request(x):
                requested = True
                return _CPU
            return x

        args = tuple(to_cpu(a) for a in args)
        kwargs = {k: to_cpu(v) for k, v in kwargs.items()}
        inputs = {id(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        if not requested:
            return out

        def wrap(t):
            if not isinstance(t, torch.Tensor) or isinstance(t, DeviceTensor):
                return t
            # `.to(cpu)` of a CPU tensor returns the tensor itself; a device move makes a copy
            return DeviceTensor(t.detach().clone() if id(t) in inputs else t, requires_grad=t.requires_grad)

        return tree_map(wrap, out)


class _Dispatch(TorchDispatchMode):
    """Check the placement of every op's tensors, run it on the CPU data, and re-wrap the results.

    `device_ops` counts the ops that ran on the simulated device: a test asserts it grew, so a run
    that silently stayed on the CPU does not pass for a placement test.
    """

    def __init__(self):
        super().__init__()
        self.device_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        on_device = [t for t in tensors if isinstance(t, DeviceTensor)]
        plain = [t for t in tensors if not isinstance(t, DeviceTensor)]
        self.device_ops += bool(on_device)
        if on_device and plain and func not in _CROSS_DEVICE:
            if torch.Tag.pointwise in func.tags:
                plain = [t for t in plain if t.dim() > 0]
            elif func in _INDEXING:
                # the indexed tensor (and index_put's values, unless 0-dim) must be on the device
                values = args[2] if len(args) > 2 and func is not aten.index.Tensor else None
                plain = [t for t in plain if t is args[0] or (t is values and t.dim() > 0)]
            if plain:
                raise _mixing_error(func, plain)
        device = kwargs.get("device")
        requested = device is not None and _is_device_request(device)
        if requested:
            kwargs = {**kwargs, "device": _CPU}
        elems = {}  # id(elem) -> its DeviceTensor: an in-place op returns its own input

        def unwrap(t):
            if isinstance(t, DeviceTensor):
                elems[id(t.elem)] = t
                return t.elem
            return t

        try:
            out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        except Exception as err:
            meta = [(tuple(t.shape), t.stride(), type(t).__name__) for t in tensors]
            raise type(err)(f"{err} [simulated device: {func} on {meta}]") from err
        if torch.Tag.inplace_view in func.tags and isinstance(args[0], DeviceTensor):
            # transpose_/squeeze_/as_strided_ change the wrapper's own sizes and strides too
            with torch._C._DisableTorchDispatch():
                func(args[0], *args[1:], **kwargs)
        wrap_new = requested or (device is None and bool(on_device))

        def rewrap(t):
            if not isinstance(t, torch.Tensor):
                return t
            if id(t) in elems:
                return elems[id(t)]
            return DeviceTensor(t) if wrap_new else t

        return tree_map(rewrap, out)


class SimulatedDevice:
    """What `simulated_device()` yields: the device, and how many ops ran on it so far."""

    def __init__(self, dispatch: _Dispatch):
        self.device, self._dispatch = DEVICE, dispatch

    @property
    def ops(self) -> int:
        return self._dispatch.device_ops


@contextlib.contextmanager
def simulated_device():
    """Inside: `DEVICE` (`torch.device("meta")`) behaves as an accelerator distinct from the CPU.

    Yields a `SimulatedDevice` (`.device`, and `.ops`: the ops that ran on it).
    """
    import safetensors.torch as st

    # safetensors takes meta tensors for storage-less placeholders: it would not see that tied
    # weights share memory, nor load onto them; show it the CPU data, as it sees a GPU's
    find_shared, is_complete, load_file = st._find_shared_tensors, st._is_complete, st.load_file

    def load_to_device(filename, device="cpu", **kwargs):
        # safetensors reads onto real devices only: read on the CPU, then move as a GPU load would
        if not _is_device_request(device):
            return load_file(filename, device=device, **kwargs)
        return {k: v.to(DEVICE) for k, v in load_file(filename, device="cpu", **kwargs).items()}

    with (
        mock.patch.object(st, "_find_shared_tensors", lambda sd: find_shared(to_cpu(sd))),
        mock.patch.object(st, "_is_complete", lambda t: is_complete(to_cpu(t))),
        mock.patch.object(st, "load_file", load_to_device),
        _Functions(),
        _Dispatch() as dispatch,
    ):
        yield SimulatedDevice(dispatch)


@contextlib.contextmanager
def simulated_accelerator():
    """`simulated_device()`, and `accelerate` placing models and batches on it (as on a GPU machine).

    Yields the `SimulatedDevice`.
    """
    import accelerate

    device = property(lambda self: DEVICE)
    with mock.patch.object(accelerate.Accelerator, "device", device), simulated_device() as sim:
        yield sim


def to_cpu(tree):
    """The CPU data of every `DeviceTensor` in a (nested) structure."""
    return tree_map(lambda t: t.elem if isinstance(t, DeviceTensor) else t, tree)

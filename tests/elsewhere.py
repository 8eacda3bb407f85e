"""A device that is not the host, on a machine with only a CPU: host/device mixing made visible.

On a GPU a tensor made on the host and handed to a model on ``cuda:0`` stops the job
(``index_select``: "Expected all tensors to be on the same device"); on a CPU-only machine every
tensor is on the CPU and no test can see it. Inside :func:`elsewhere` a second device exists:

* tensors on it report the device :data:`DEVICE` (torch's ``lazy`` device: a device type that
  has its bookkeeping — a device guard — in every CPU build of torch, so that autograd runs on it,
  and that neither torch nor transformers treats as special), and hold a CPU tensor that does the
  arithmetic;
* every operation whose tensors are on both the host and that device raises as CUDA does
  (a host tensor of no dimensions, a number, is allowed, as CUDA allows it);
* ``.numpy()`` and ``numpy.asarray`` of a device tensor raise, as on CUDA, until it is brought
  back with ``.cpu()`` / ``.to("cpu")``; ``.item()`` and ``.tolist()`` work (CUDA reads them back);
* ``model.to(DEVICE)``, ``tensor.to(other.device)``, ``torch.zeros(..., device=x.device)`` and the
  other factories work as on a GPU.

CUDA is the device asked for: inside, ``torch.cuda.is_available()`` is True, so that code choosing
``auto`` picks ``cuda``, and ``cuda`` / ``cuda:N`` in ``.to``, in a factory's ``device=`` or in
``torch.device`` objects handed to them means :data:`DEVICE`; the ``torch.cuda`` functions the
code calls on a GPU (``synchronize``, the memory counters, ``is_bf16_supported``: no, so bf16
falls back to float32 as on a CPU without it) answer as a GPU with nothing to report would. The
arithmetic is the CPU's, so the numbers equal a CPU run's; only the bookkeeping is a device's.

:func:`install` enters it for the rest of the process: with ``HEADWATCH_ELSEWHERE=1`` the tests'
Snakemake jobs do (``tests/warmstart_site/sitecustomize.py``, and a job forked warm by
``tests/warmstart.py``): how every rule script is run on a device.
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

DEVICE = torch.device("lazy", 0)
HOST = torch.device("cpu")


class DeviceMixingError(RuntimeError):
    """Tensors on the host and on the device in one operation (what CUDA raises)."""


ENV = "HEADWATCH_ELSEWHERE"
"""Set to 1: the tests' Snakemake jobs run inside :func:`elsewhere` (:func:`install`)."""


def _on_device(d) -> bool:
    return d is not None and torch.device(d).type in (DEVICE.type, "cuda")


class Remote(torch.Tensor):
    """A tensor on :data:`DEVICE`: its numbers in ``self.local`` (a CPU tensor)."""

    local: torch.Tensor

    @staticmethod
    def __new__(cls, local: torch.Tensor, requires_grad: bool = False):
        assert not isinstance(local, Remote)
        r = torch.Tensor._make_wrapper_subclass(cls, local.size(), strides=local.stride(),
                                                storage_offset=local.storage_offset(), dtype=local.dtype,
                                                layout=local.layout, device=DEVICE, requires_grad=requires_grad)
        r.local = local
        return r

    def __repr__(self, *, tensor_contents=None):
        return f"Remote({self.local!r}, device={DEVICE})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with _Dispatch():        # only ever reached inside elsewhere(); run it there
            return func(*args, **(kwargs or {}))


_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default, torch.ops.aten.detach.default,
           torch.ops.aten.alias.default, torch.ops.aten._local_scalar_dense.default, torch.ops.aten.lift_fresh.default}
"""Operations allowed to take tensors of both places: the copies between them."""
_INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
             torch.ops.aten._index_put_impl_.default, torch.ops.aten._unsafe_index.Tensor,
             torch.ops.aten._unsafe_index_put.default}
"""Advanced indexing: CUDA takes index tensors on the host (the argument ``indices``); nothing else."""


class _Dispatch(TorchDispatchMode):
    """Every aten operation: refuse mixed places, compute on the CPU, put results on the device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        remote = host = False
        first_host = None

        def look(t):
            nonlocal remote, host, first_host
            if isinstance(t, Remote):
                remote = True
            elif isinstance(t, torch.Tensor) and t.dim() > 0 and t.device.type == "cpu":
                host = True
                first_host = first_host if first_host is not None else tuple(t.shape)
            return t

        if func in _INDEXING:      # the index tensors (args[1]) may be on the host
            tree_map(look, (args[0], args[2:], kwargs))
            tree_map(lambda t: isinstance(t, Remote) and look(t), args[1])
        else:
            tree_map(look, (args, kwargs))
        if remote and host and func not in _COPIES:
            raise DeviceMixingError(
                f"Expected all tensors to be on the same device, but found at least two devices, {DEVICE} and "
                f"cpu! ({func}: a host tensor of shape {first_host} met tensors on the device)")
        target = kwargs.get("device")
        if func is torch.ops.aten._local_scalar_dense.default:
            return tree_map(lambda t: t.local if isinstance(t, Remote) else t, args)[0].item()
        local_args, local_kwargs = tree_map(lambda t: t.local if isinstance(t, Remote) else t, (args, kwargs))
        if _on_device(target):
            local_kwargs = dict(local_kwargs, device=HOST)
        if func is torch.ops.aten.copy_.default:
            func(*local_args, **local_kwargs)
            return args[0]
        out = func(*local_args, **local_kwargs)
        to_device = _on_device(target) or (remote and not (target is not None and torch.device(target).type == "cpu"))
        if func in (torch.ops.aten._to_copy.default,) and target is None:
            to_device = remote
        if not to_device:
            return out
        return tree_map(lambda t: Remote(t) if isinstance(t, torch.Tensor) and not isinstance(t, Remote) else t, out)


class _ToDevice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return Remote(x.detach().clone())

    @staticmethod
    def backward(ctx, g):
        return g.local if isinstance(g, Remote) else g


class _ToHost(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.local.clone()

    @staticmethod
    def backward(ctx, g):
        return Remote(g)


_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray, torch.from_numpy}
_DATA = torch._C.TensorBase.__dict__["data"]


def _is_set_data(func) -> bool:
    """``tensor.data = other`` (a new method-wrapper each time it is looked up)."""
    return getattr(func, "__self__", None) is _DATA and getattr(func, "__name__", "") == "__set__"


def _host_index(index):
    """An index with its lists (of ints or bools) as host tensors."""
    if isinstance(index, tuple):
        return tuple(_host_index(i) for i in index)
    if isinstance(index, list) and all(isinstance(i, (bool, int)) for i in index):
        return torch.tensor(index)
    return index


_READS = {torch.Tensor.numpy, torch.Tensor.__array__}


def _moved(t: torch.Tensor, device, rest: dict) -> torch.Tensor:
    """``t.to(device, **rest)`` across the two places."""
    with torch._C.DisableTorchFunctionSubclass():
        if isinstance(t, Remote):
            if device is not None and device.type == "cpu":
                out = _ToHost.apply(t)
                return out.to(**rest) if rest else out
            return t.to(**rest) if rest else t
        if device is not None and _on_device(device):
            local = t.to(**rest) if rest else t
            if local.requires_grad and torch.is_grad_enabled():     # keeps the autograd graph
                return _ToDevice.apply(local)
            return Remote(local.detach()).requires_grad_(local.requires_grad)
        return t.to(device, **rest) if device is not None else (t.to(**rest) if rest else t)


class _Function(TorchFunctionMode):
    """``.to`` / ``.cuda`` / ``.cpu`` between the places, factories given the device, reads refused."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            device, dtype, _, memory_format = torch._C._nn._parse_to(*args[1:], **kwargs)
            rest = {k: v for k, v in dict(dtype=dtype, memory_format=memory_format).items() if v is not None}
            for k in ("copy", "non_blocking"):
                if kwargs.get(k):
                    rest[k] = kwargs[k]
            return _moved(args[0], device, rest)
        if func is torch.Tensor.cuda:
            return _moved(args[0], DEVICE, {})
        if func is torch.Tensor.cpu:
            return _moved(args[0], HOST, {})
        if _is_set_data(func) and isinstance(args[0], Remote) and isinstance(args[1], Remote):
            out = func(*args, **kwargs)          # the tensor's own metadata (dtype, shape) ...
            args[0].local = args[1].local        # ... and the numbers it holds
            return out
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__) and isinstance(args[0], Remote):
            # torch makes the tensors of a list index and of a number on the indexed tensor's device in
            # C++, below this mode; made here on the host instead, which CUDA allows for both
            args = (args[0], _host_index(args[1]), *args[2:])
            if func is torch.Tensor.__setitem__ and isinstance(args[2], (bool, int, float)):
                args = (*args[:2], torch.tensor(args[2], dtype=args[0].dtype))
            return func(*args)
        if func is torch.Tensor.tolist and isinstance(args[0], Remote):
            return args[0].local.tolist()          # CUDA copies to the host for it
        if func in _READS and isinstance(args[0], Remote):
            raise TypeError(f"can't convert {DEVICE} device type tensor to numpy. Use Tensor.cpu() to copy the "
                            "tensor to host memory first.")
        if func in _FACTORIES and _on_device(kwargs.get("device")):
            with torch._C.DisableTorchFunctionSubclass():
                local = func(*args, **dict(kwargs, device=HOST))
            return _moved(local, DEVICE, {})
        return func(*args, **kwargs)


_CUDA_ANSWERS = dict(is_available=lambda: True, device_count=lambda: 1, is_bf16_supported=lambda *a, **k: False,
                     synchronize=lambda *a, **k: None, reset_peak_memory_stats=lambda *a, **k: None,
                     max_memory_allocated=lambda *a, **k: 0, max_memory_reserved=lambda *a, **k: 0,
                     memory_allocated=lambda *a, **k: 0, empty_cache=lambda: None,
                     get_device_name=lambda *a, **k: "a device emulated on the CPU (tests/elsewhere.py)",
                     _lazy_init=lambda: None)


def _as_cuda(f):
    """``f(device_type)`` answering for CUDA where it is asked about :data:`DEVICE`'s type."""
    return lambda device_type="cuda", *a, **k: f("cuda" if device_type == DEVICE.type else device_type, *a, **k)


def _patches() -> list[tuple[object, str, object]]:
    """(owner, name, stand-in) of everything :func:`elsewhere` answers for: the torch.cuda functions,
    autocast's state asked by a tensor's device type, and the devices fused optimizers run on."""
    import torch.optim.optimizer as optimizer

    fused = optimizer._get_fused_kernels_supported_devices
    out = [(torch.cuda, k, v) for k, v in _CUDA_ANSWERS.items()]
    load = torch.load

    def load_to(*args, map_location=None, **kwargs):      # a checkpoint read straight onto the device
        if map_location is None or not _on_device(map_location):
            return load(*args, map_location=map_location, **kwargs)
        return tree_map(lambda t: _moved(t, DEVICE, {}) if isinstance(t, torch.Tensor) else t,
                        load(*args, map_location="cpu", **kwargs))

    out += [(torch, "load", load_to),
            (torch, "is_autocast_enabled", _as_cuda(torch.is_autocast_enabled)),
            (torch, "get_autocast_dtype", _as_cuda(torch.get_autocast_dtype)),
            (optimizer, "_get_fused_kernels_supported_devices", lambda: [*fused(), DEVICE.type])]
    return out


@contextlib.contextmanager
def elsewhere():
    """Inside: :data:`DEVICE` exists, CUDA is asked for by its name, and mixing it with the host
    raises (module doc)."""
    patches = _patches()
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        with _Function(), _Dispatch():
            yield DEVICE
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def install() -> None:
    """Enter :func:`elsewhere` for the rest of this process (a rule script's)."""
    global _INSTALLED
    if _INSTALLED is None:
        _INSTALLED = elsewhere()
        _INSTALLED.__enter__()


_INSTALLED = None


def on_device(t: torch.Tensor) -> bool:
    """Whether ``t`` is on :data:`DEVICE`."""
    return isinstance(t, Remote)


def inside(fn):
    """A test function run inside :func:`elsewhere`."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with elsewhere():
            return fn(*args, **kwargs)
    return run

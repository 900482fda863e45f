"""Contexts, buffers, numpy conversion and DLPack interchange.

Stream ordering. On a GPU every bufkern call is queued on its context's
stream and returns at once. The binding remembers, for each result, the
context whose stream produced it (``Buffer._pending``) until it knows the
work has completed, and uses that to order work between streams:

- a buffer used by a call on another context (or the thread's default
  context) whose stream is not known to be the same one is waited for first;
- ``__dlpack__(stream=S)`` returns at once when the producing context queues
  on S (``Context.set_stream(S)``), and otherwise waits for the producer;
- ``from_dlpack`` passes the consumer stream of ``ctx`` (when set with
  ``set_stream``) to the producer, so the producer orders its own work before
  it; without a known stream it asks the producer to order against the legacy
  default stream and waits for that stream once (a host synchronization).

Binding a Context to the framework's stream (``ctx.set_stream(
torch.cuda.current_stream().cuda_stream)``) therefore gives copy-free and
wait-free interchange in both directions.
"""

from __future__ import annotations

import numbers
import sys
import threading
from ctypes import POINTER, addressof, byref, c_double, c_int64, c_void_p, cast
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _ffi
from ._ffi import (
    DL_CPU,
    DL_CUDA,
    DL_FLOAT,
    BkDevice,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DtypeError,
    InvalidArgumentError,
    check,
    load,
)

F32 = 0
F64 = 1
BF16 = 2
F16 = 3

_DTYPE_CODES = {
    "float32": F32,
    "f32": F32,
    "single": F32,
    "float64": F64,
    "f64": F64,
    "double": F64,
    "bfloat16": BF16,
    "bf16": BF16,
    "float16": F16,
    "f16": F16,
    "half": F16,
}
_NUMPY_DTYPES = {F32: np.dtype(np.float32), F64: np.dtype(np.float64)}
_DTYPE_NAMES = {F32: "float32", F64: "float64", BF16: "bfloat16", F16: "float16"}

DtypeLike = Any
"""A dtype: a name ("float32", "f8", "double"), a numpy dtype or type, or a torch dtype."""

DeviceLike = Any
"""A device: "cpu", "cuda", "cuda:N", a (kind, index) pair, a torch.device or a Context."""


def _torch():
    """The torch module when the program has imported it (never imported here)."""
    return sys.modules.get("torch")


def is_torch_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_code(dtype: DtypeLike, fn: str = "bufkern") -> int:
    """The bk_dtype code of a dtype given as a name ("float32", "f8"), a numpy
    dtype or type, a torch dtype, or a code; DtypeError for anything else."""
    if isinstance(dtype, numbers.Integral) and not isinstance(dtype, bool):
        if int(dtype) in _DTYPE_NAMES:
            return int(dtype)
        raise DtypeError(_ffi.ERR_DTYPE, f"{fn}: dtype code {int(dtype)} is not a bk_dtype")
    name = None
    if isinstance(dtype, str):
        name = dtype.strip().lower()
        if name.startswith("torch."):
            name = name[len("torch."):]
    else:
        torch = _torch()
        if torch is not None and isinstance(dtype, torch.dtype):
            name = str(dtype)[len("torch."):]
    if name is not None and name in _DTYPE_CODES:
        return _DTYPE_CODES[name]
    try:
        np_name = np.dtype(name if name is not None else dtype).name
    except (TypeError, ValueError):
        np_name = None
    if np_name in _DTYPE_CODES:
        return _DTYPE_CODES[np_name]
    shown = np_name or name or repr(dtype)
    raise DtypeError(_ffi.ERR_DTYPE, f"{fn}: dtype {shown} is not one of float32, float64")


def dtype_name(code: int) -> str:
    return _DTYPE_NAMES.get(code, f"dtype code {code}")


_INT32_MAX = 2**31 - 1


def _device_index(index, device, fn) -> int:
    if not isinstance(index, numbers.Integral) or isinstance(index, bool):
        raise TypeError(f"{fn}: the device index of {device!r} must be an integer, got {type(index).__name__}")
    index = int(index)
    if index < 0 or index > _INT32_MAX:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT,
            f"{fn}: device index {index} of {device!r} is outside [0, {_INT32_MAX}]",
        )
    return index


def parse_device(device: DeviceLike, fn: str = "bufkern.Context") -> Tuple[int, int]:
    """(kind, index) with the DLPack codes from "cpu", "cuda", "cuda:N", a
    (kind, index) pair, a Context, or an object with .type and .index
    (torch.device). Indices outside int32 are rejected, not truncated."""
    if type(device) is Context:
        return device._kind, device._index
    if isinstance(device, str):
        text = device.strip().lower()
        name, _, idx = text.partition(":")
        if name in ("cpu", "cuda") and (idx == "" or idx.isdigit()):
            index = int(idx) if idx else 0
            return (DL_CPU if name == "cpu" else DL_CUDA), _device_index(index, device, fn)
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT, f"{fn}: device {device!r} is not 'cpu', 'cuda' or 'cuda:N'"
        )
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
        if isinstance(kind, str):
            kind = {"cpu": DL_CPU, "cuda": DL_CUDA}.get(kind.strip().lower(), -1)
        if not isinstance(kind, numbers.Integral) or not -(2**31) <= int(kind) <= _INT32_MAX:
            raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: device kind of {device!r} is not cpu or cuda")
        return int(kind), _device_index(index, device, fn)
    if hasattr(device, "type") and hasattr(device, "index"):
        index = device.index
        return parse_device(f"{device.type}:{0 if index is None else index}", fn)
    raise TypeError(f"{fn}: cannot read a device from {type(device).__name__} {device!r}")


def device_name(kind: int, index: int) -> str:
    if kind == DL_CPU:
        return "cpu"
    if kind == DL_CUDA:
        return f"cuda:{index}"
    return f"device({kind}, {index})"


# ---------------------------------------------------------------------------
# Holding objects for the duration of a C call
# ---------------------------------------------------------------------------

# ctypes releases the GIL for every library call, so another thread may run
# close() while a call reads a buffer or queues work on a context. Every C
# call that takes a handle therefore holds its Buffer and Context objects:
# close() on a held object only marks it closed, and the last holder releases
# the handle when its call has returned. The lock guards the counts and the
# handle swaps only, never a C call.
_USE = threading.Lock()


def hold(objs, labels, fn) -> None:
    """Count one use of each object (Buffers, Contexts); ValueError naming the
    label when one is closed (nothing stays counted then)."""
    with _USE:
        for i, o in enumerate(objs):
            if o._h is None:
                for p in objs[:i]:
                    p._uses -= 1
                what = "context" if type(o) is Context else "buffer"
                raise ValueError(f"{fn}: {labels[i]} is a closed {what}")
            o._uses += 1


def unhold(objs) -> None:
    """Drop the uses counted by hold; release what was closed meanwhile."""
    doomed = []
    with _USE:
        for o in objs:
            o._uses -= 1
            if o._uses == 0 and o._doomed is not None:
                doomed.append((o, o._doomed))
                o._doomed = None
    for o, h in doomed:
        o._free(h)


class _Using:
    """``with _Using(fn, (obj, label), ...):`` holds the objects that are not None."""

    __slots__ = ("objs",)

    def __init__(self, fn, *pairs):
        objs = [o for o, _ in pairs if o is not None]
        hold(objs, [label for o, label in pairs if o is not None], fn)
        self.objs = objs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        unhold(self.objs)


def _close_handle(obj) -> Optional[int]:
    """Take obj's handle for release, or None when it is already closed or
    still held by a call (the last holder releases it then)."""
    with _USE:
        h = obj._h
        if h is None:
            return None
        obj._h = None
        if obj._uses:
            obj._doomed = h
            return None
        return h


# ---------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------


class _DefaultContext:
    """Marks work queued on the calling thread's default context (ctx=None)."""

    __slots__ = ()

    def __repr__(self):
        return "<bufkern thread default context>"


DEFAULT = _DefaultContext()

_reset_stream_fn = None


class Context:
    """A bufkern context: a device, its stream, library handles and caches.

    ``Context("cpu")``, ``Context("cuda:0")``, ``Context(torch.device("cuda", 1))``
    or ``Context(("cuda", 1))``. A context queues work for one thread at a
    time; ``close()`` from another thread while a call uses the context is
    deferred until that call returns. Wherever a function takes ``ctx=``, a
    device string or a torch.device stands for the calling thread's own
    Context for that device (made on first use and kept), and None for the
    thread's default context of the inputs' device.

    Raises InvalidArgumentError (unknown device, a CPU index other than 0, an
    index outside int32), UnsupportedError (CUDA in a build without it),
    NoDeviceError, OutOfMemoryError, DeviceError.

    Example::

        with bufkern.Context("cpu") as c:
            y = bufkern.softmax([[1.0, 2.0]], ctx=c)
    """

    __slots__ = ("_h", "_kind", "_index", "_stream", "_uses", "_doomed", "__weakref__")

    def __init__(self, device: DeviceLike = "cpu"):
        self._h = None
        self._uses = 0
        self._doomed = None
        kind, index = parse_device(device, "bufkern.Context")
        self._kind, self._index = kind, index
        self._stream = None
        lib = load()
        out = c_void_p()
        check(lib.bk_context_create(BkDevice(kind, index), byref(out)))
        self._h = out.value

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        return device_name(self._kind, self._index)

    @property
    def is_cuda(self) -> bool:
        return self._kind == DL_CUDA

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def stream(self) -> Optional[int]:
        """The cudaStream_t handle set with set_stream, or None for the
        context's own stream. The legacy default stream reads as 1."""
        return self._stream

    def set_stream(self, stream: Optional[int]) -> None:
        """Queue this context's work on a CUDA stream given as an integer
        cudaStream_t handle (``torch.cuda.current_stream().cuda_stream``).

        None and 0 mean the legacy default stream (PyTorch reports it as 0;
        it is passed to CUDA as cudaStreamLegacy, 1); 2 is the per-thread
        default stream. ``reset_stream()`` returns to the context's own
        stream. The caller keeps the stream alive while the context and its
        buffers are in use. Work already queued on the previous stream
        completes first. Raises TypeError (not an int), InvalidArgumentError
        (negative), UnsupportedError (a CPU context).
        """
        if stream is None:
            handle = 1
        else:
            if not isinstance(stream, numbers.Integral) or isinstance(stream, bool):
                raise TypeError(f"Context.set_stream: stream must be an int handle or None, got {stream!r}")
            handle = int(stream)
            if handle < 0 or handle >= 2**64:
                raise InvalidArgumentError(
                    _ffi.ERR_INVALID_ARGUMENT, f"Context.set_stream: stream = {handle} is not a stream handle"
                )
            if handle == 0:
                handle = 1
        with _Using("Context.set_stream", (self, "the context")):
            check(load().bk_context_set_stream(self._h, handle))
        self._stream = handle

    def reset_stream(self) -> None:
        """Queue this context's work on its own non-blocking stream again
        (bk_context_reset_stream). Work queued on the previous stream
        completes first. A CPU context has no streams: nothing happens. Raises
        UnsupportedError with a library that predates bk_context_reset_stream
        and while the current stream is being captured into a CUDA graph."""
        global _reset_stream_fn
        if _reset_stream_fn is None:
            _reset_stream_fn = _ffi.optional_symbol("bk_context_reset_stream", _ffi.c_int, [c_void_p])
        if _reset_stream_fn is None:
            raise _ffi.UnsupportedError(
                _ffi.ERR_UNSUPPORTED,
                f"Context.reset_stream: the loaded library ({_ffi.library_path()}) has no "
                "bk_context_reset_stream; rebuild libbufkern",
            )
        with _Using("Context.reset_stream", (self, "the context")):
            check(_reset_stream_fn(self._h))
        self._stream = None

    def synchronize(self) -> None:
        """Wait until all work queued on the context has completed."""
        with _Using("Context.synchronize", (self, "the context")):
            check(load().bk_context_synchronize(self._h))

    def _free(self, h) -> None:
        lib = load()
        try:
            lib.bk_context_synchronize(h)
        finally:
            lib.bk_context_destroy(h)

    def close(self) -> None:
        """Wait for the context's queued work and release it. Buffers it made
        stay valid (they keep what they need of the context alive). A second
        close is a no-op; during a call on another thread the release waits
        for that call."""
        h = _close_handle(self)
        if h is not None:
            self._free(h)

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and _ffi is not None and _ffi._lib is not None:
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        state = "" if self._h is not None else ", closed"
        stream = "" if self._stream is None else f", stream={self._stream:#x}"
        return f"bufkern.Context({self.device!r}{stream}{state})"


_tls = threading.local()


def _thread_context(kind: int, index: int) -> Context:
    """The calling thread's own Context for a device, made on first use."""
    contexts = getattr(_tls, "contexts", None)
    if contexts is None:
        contexts = _tls.contexts = {}
    c = contexts.get((kind, index))
    if c is None or c._h is None:
        c = contexts[(kind, index)] = Context((kind, index))
    return c


def resolve_ctx(ctx, fn: str = "bufkern") -> Optional[Context]:
    """A Context or None for a ctx argument: a Context, None, a device string,
    a (kind, index) pair or a torch.device."""
    if ctx is None or type(ctx) is Context:
        return ctx
    if isinstance(ctx, (str, tuple)) or (hasattr(ctx, "type") and hasattr(ctx, "index")):
        kind, index = parse_device(ctx, fn)
        return _thread_context(kind, index)
    raise TypeError(
        f"{fn}: ctx must be a bufkern.Context, a device ('cpu', 'cuda:0', torch.device) or None, "
        f"got {type(ctx).__name__}"
    )


def ctx_handle(ctx, fn: str = "bufkern"):
    """(Context or None, ordering key) for a ctx argument (None: thread default)."""
    c = resolve_ctx(ctx, fn)
    return c, (DEFAULT if c is None else c)


def _same_stream(a, b) -> bool:
    if a is b:
        return True
    return (
        type(a) is Context
        and type(b) is Context
        and a._stream is not None
        and a._stream == b._stream
        and a._index == b._index
    )


def _stream_matches(ctx, consumer_stream) -> bool:
    return type(ctx) is Context and ctx._stream is not None and ctx._stream == consumer_stream


def _legacy_waiter(index: int) -> Context:
    waiters = getattr(_tls, "legacy_waiters", None)
    if waiters is None:
        waiters = _tls.legacy_waiters = {}
    ctx = waiters.get(index)
    if ctx is None:
        ctx = Context(("cuda", index))
        ctx.set_stream(1)
        waiters[index] = ctx
    return ctx


def wait_legacy_stream(index: int) -> None:
    """Host wait for the legacy default stream of CUDA device `index`."""
    _legacy_waiter(index).synchronize()


# ---------------------------------------------------------------------------
# Buffers
# ---------------------------------------------------------------------------


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _HostView:
    """A numpy view's owner: the memory of a CPU buffer, read only, kept
    alive by a reference of its own."""

    __slots__ = ("__array_interface__", "_buf")

    def __init__(self, buf, ptr, shape, typestr):
        self._buf = buf
        self.__array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, True), "version": 3}


class Buffer:
    """An immutable array in bufkern memory: a dtype (float32 or float64), a
    shape, a device ("cpu" or "cuda:N").

    The library stores buffers flat and contiguous; ``shape`` is kept by the
    binding (the array's shape for imported data, the result's shape for a
    primitive's result) and primitives infer their geometry from it.

    Buffers are not built directly: use ``bufkern.from_numpy``,
    ``bufkern.zeros``, ``bufkern.from_dlpack`` or a primitive. They convert
    with ``np.asarray(buf)``, ``buf.numpy()``, ``torch.from_dlpack(buf)`` and
    ``numpy.from_dlpack(buf)`` (shape kept; a consumer that reads DLPack 1.0
    shares the memory read-only, an older one receives a copy).

    The reference is dropped by ``close()`` (or ``with``), or when the object
    is collected; ``retain()`` returns a second, independent reference.
    ``close()`` during a call that uses the buffer on another thread takes
    effect when that call returns.

    Example::

        b = bufkern.from_numpy(np.arange(6.0).reshape(2, 3))
        b          # Buffer([[0., 1., 2.], [3., 4., 5.]], dtype=float64, device='cpu')
        b.shape    # (2, 3)
    """

    __slots__ = ("_h", "_pending", "_shape", "_uses", "_doomed", "_meta", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "bufkern.Buffer is not built directly: use bufkern.from_numpy, bufkern.zeros, "
            "bufkern.from_dlpack or a primitive"
        )

    @classmethod
    def _wrap(cls, handle, pending=None, shape=None) -> Buffer:
        self = object.__new__(cls)
        self._h = handle
        self._pending = pending
        self._shape = shape
        self._uses = 0
        self._doomed = None
        self._meta = None
        return self

    # -- lifetime -------------------------------------------------------------

    def _free(self, h) -> None:
        load().bk_buffer_release(h)

    def close(self) -> None:
        """Drop this reference (the memory goes with the last one). A second
        close is a no-op."""
        h = _close_handle(self)
        if h is not None:
            self._free(h)

    def __del__(self):
        # No call holds a buffer that is being collected.
        h = getattr(self, "_h", None)
        if h is not None and _ffi is not None and _ffi._lib is not None:
            self._h = None
            try:
                _ffi._lib.bk_buffer_release(h)
            except Exception:
                pass

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._h is None

    def retain(self) -> Buffer:
        """A new Buffer object holding another reference to the same memory."""
        with _Using("Buffer.retain", (self, "the buffer")):
            h = load().bk_buffer_retain(self._h)
        out = Buffer._wrap(h, self._pending, self._shape)
        out._meta = self._meta
        return out

    # -- properties -------------------------------------------------------------

    def _info(self):
        """(dtype code, length, (device kind, index)), read once."""
        m = self._meta
        if m is None:
            lib = load()
            with _Using("Buffer", (self, "the buffer")):
                h = self._h
                d = lib.bk_buffer_device(h)
                m = (int(lib.bk_buffer_dtype(h)), int(lib.bk_buffer_length(h)), (int(d.kind), int(d.index)))
            self._meta = m
        return m

    @property
    def dtype(self) -> np.dtype:
        """numpy's float32 or float64 dtype."""
        return _NUMPY_DTYPES[self._info()[0]]

    @property
    def length(self) -> int:
        """The number of elements."""
        return self._info()[1]

    size = length

    def __len__(self) -> int:
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d bufkern.Buffer")
        return s[0]

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.itemsize

    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape, a tuple of ints (row-major)."""
        s = self._shape
        return s if s is not None else (self.length,)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def _device_pair(self) -> Tuple[int, int]:
        return self._info()[2]

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        return device_name(*self._device_pair)

    @property
    def is_cuda(self) -> bool:
        return self._device_pair[0] == DL_CUDA

    @property
    def data_ptr(self) -> int:
        """Address of the first element (device pointer on a GPU); 0 when empty."""
        with _Using("Buffer.data_ptr", (self, "the buffer")):
            return load().bk_buffer_data(self._h) or 0

    def reshape(self, *shape: Union[int, Sequence[int]]) -> Buffer:
        """A new reference with another shape of the same length (same
        memory); one entry may be -1. InvalidArgumentError when the element
        count differs."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        shape = tuple(int(d) for d in shape)
        n = self.length
        if shape.count(-1) == 1:
            rest = _prod(d for d in shape if d != -1)
            if rest == 0 or n % rest:
                raise InvalidArgumentError(
                    _ffi.ERR_INVALID_ARGUMENT, f"Buffer.reshape: cannot view {n} elements as {shape}"
                )
            shape = tuple(n // rest if d == -1 else d for d in shape)
        if any(d < 0 for d in shape) or _prod(shape) != n:
            raise InvalidArgumentError(
                _ffi.ERR_INVALID_ARGUMENT, f"Buffer.reshape: cannot view {n} elements as {shape}"
            )
        out = self.retain()
        out._shape = shape
        return out

    def __repr__(self):
        if self._h is None:
            return "<bufkern.Buffer closed>"
        code, n, dev = self._info()
        tail = f"dtype={dtype_name(code)}, device={device_name(*dev)!r}"
        if dev[0] == DL_CPU and n <= 1000:
            body = np.array2string(self.numpy(), separator=", ", prefix="Buffer(")
            return f"Buffer({body}, {tail})"
        return f"Buffer(shape={self.shape}, {tail})"

    # -- ordering ----------------------------------------------------------------

    def _settle(self) -> None:
        """Wait until the work that produces this buffer has completed."""
        p = self._pending
        if p is None:
            return
        if p is DEFAULT:
            _sync_default_for(self)
        elif p._h is not None:
            p.synchronize()
        self._pending = None

    def _order_for(self, key) -> None:
        """Make the buffer safe to read from work queued on context `key`."""
        p = self._pending
        if p is None or _same_stream(p, key):
            return
        self._settle()

    # -- host copies ---------------------------------------------------------------

    def numpy(self, copy: bool = True) -> np.ndarray:
        """The contents as a numpy array of shape ``self.shape``.

        copy=True (default) copies into a fresh, writable host array (from
        any device). copy=False returns a read-only view of a CPU buffer's
        memory (it keeps the memory alive); BufferError for a GPU buffer.
        """
        code, n, dev = self._info()
        if not copy:
            if dev[0] != DL_CPU:
                raise BufferError("Buffer.numpy(copy=False): the buffer is on a GPU; use copy=True")
            dt = _NUMPY_DTYPES[code]
            if n == 0:
                arr = np.empty(self.shape, dt)
                arr.flags.writeable = False
                return arr
            keep = self.retain()
            arr = np.asarray(_HostView(keep, keep.data_ptr, self.shape, dt.str))
            return arr
        arr = np.empty(n, dtype=_NUMPY_DTYPES[code])
        p = self._pending
        pc = p if type(p) is Context and p._h is not None else None
        with _Using("Buffer.numpy", (self, "the buffer"), (pc, "the producing context")):
            check(load().bk_buffer_to_host(pc._h if pc else None, self._h, arr.ctypes.data if n else None, n))
        self._pending = None
        return arr.reshape(self.shape)

    def tolist(self):
        return self.numpy().tolist()

    def item(self) -> float:
        """The single element of a one-element buffer, as a Python float."""
        if self.length != 1:
            raise ValueError(f"Buffer.item: the buffer has {self.length} elements, not 1")
        return float(self.numpy().reshape(-1)[0])

    def __float__(self) -> float:
        return self.item()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        arr = self.numpy(copy=copy is not False)
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def copy(self, ctx: Any = None) -> Buffer:
        """A copy on ctx's device (a Context, a device string, a torch.device;
        None: the CPU), with the same shape."""
        c, key = ctx_handle(ctx, "Buffer.copy")
        self._order_for(key)
        if key is DEFAULT or not key.is_cuda:
            # The copy into host memory may read the buffer from another
            # stream than the one that produced it.
            self._settle()
        out = c_void_p()
        with _Using("Buffer.copy", (self, "the buffer"), (c, "ctx")):
            check(load().bk_buffer_copy(c._h if c else None, self._h, byref(out)))
        pending = key if type(key) is Context and key.is_cuda else None
        return Buffer._wrap(out.value, pending, self._shape)

    def to(self, device: Any) -> Buffer:
        """This buffer on `device` (a Context, "cpu", "cuda:N", a torch.device):
        itself when it is already there, else a copy made through that
        device's context (a Context given is used as is)."""
        c = resolve_ctx(device, "Buffer.to")
        want = (DL_CPU, 0) if c is None else (c._kind, c._index)
        if want == self._device_pair:
            return self
        return self.copy(c)

    def cpu(self) -> Buffer:
        """This buffer when on the CPU, else a CPU copy."""
        if not self.is_cuda:
            return self
        return self.copy(None)

    # -- DLPack ----------------------------------------------------------------------

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._device_pair

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack tensor with this buffer's shape.

        A consumer that passes ``max_version`` >= (1, 0) gets a
        "dltensor_versioned" capsule sharing the memory, flagged read-only
        (buffers are immutable). An older consumer, which cannot be told that
        the memory is read-only, gets a legacy "dltensor" capsule holding a
        copy that it alone owns; with ``copy=False`` it gets a BufferError
        instead. ``copy=True`` always exports a writable copy. For a GPU
        buffer the data is made ready for the consumer's ``stream`` (None: the
        legacy default stream; -1: no ordering). ``dl_device`` = the CPU on a
        GPU buffer exports a copy; ``copy=False`` with another ``dl_device``
        raises BufferError.
        """
        versioned = max_version is not None and int(tuple(max_version)[0]) >= 1
        kind, index = self._device_pair
        target, owned = self, False
        if dl_device is not None:
            want = (int(dl_device[0]), int(dl_device[1]))
            if want != (kind, index):
                if copy is False:
                    raise BufferError(
                        f"Buffer.__dlpack__: the buffer is on {device_name(kind, index)}, "
                        f"dl_device={want} needs a copy but copy=False"
                    )
                if want != (DL_CPU, 0):
                    raise BufferError(
                        f"Buffer.__dlpack__: cannot export a buffer on {device_name(kind, index)} "
                        f"to dl_device={want}"
                    )
                target, owned = self.copy(None), True
                kind, index = DL_CPU, 0
        if not owned and (copy is True or not versioned):
            if copy is False:
                raise BufferError(
                    "Buffer.__dlpack__: buffers are immutable and this consumer did not ask for DLPack 1.0 "
                    "(max_version), which can mark the memory read-only; it can only get a copy, and "
                    "copy=False forbids one"
                )
            target, owned = _clone_same_device(self), True
        if kind == DL_CUDA and stream != -1:
            consumer = 1 if stream is None or stream == 0 else int(stream)
            if not _stream_matches(target._pending, consumer):
                target._settle()
        return _export(target, versioned, read_only=not owned)


def _clone_same_device(buf: Buffer) -> Buffer:
    """A copy of buf on its device, queued where buf was produced."""
    lib = load()
    code, n, dev = buf._info()
    out = c_void_p()
    if dev[0] == DL_CUDA:
        p = buf._pending
        pc = p if type(p) is Context and p._h is not None else None
        if pc is None:
            buf._settle()
        with _Using("Buffer.__dlpack__", (buf, "the buffer"), (pc, "the producing context")):
            check(lib.bk_vec_slice(pc._h if pc else None, buf._h, n, 0, n, byref(out)))
        return wrap_result(out.value, pc if pc is not None else DEFAULT, buf._shape)
    with _Using("Buffer.__dlpack__", (buf, "the buffer")):
        check(lib.bk_buffer_copy(None, buf._h, byref(out)))
    return Buffer._wrap(out.value, None, buf._shape)


# Exported tensors by address: the struct, its shape array and the buffer
# reference it holds. The deleter may run during interpreter shutdown, so the
# table and the deleter are never freed.
_EXPORTS = _ffi.immortal({})


def _export_deleter(addr, _exports=_EXPORTS):
    entry = _exports.pop(addr, None)
    if entry is not None:
        entry[3](entry[2])


_EXPORT_DELETER = _ffi.immortal(_ffi.DLDeleter(_export_deleter))


def _export(buf: Buffer, versioned: bool, read_only: bool):
    """A DLPack capsule over buf's memory with buf's shape; the tensor holds a
    reference of its own, dropped by its deleter."""
    lib = load()
    code, n, (kind, index) = buf._info()
    with _Using("Buffer.__dlpack__", (buf, "the buffer")):
        h = lib.bk_buffer_retain(buf._h)
    shape = buf.shape
    shape_arr = (c_int64 * max(len(shape), 1))(*shape)
    if versioned:
        mt = DLManagedTensorVersioned()
        mt.version.major, mt.version.minor = _ffi.DLPACK_VERSION
        mt.flags = _ffi.DLPACK_FLAG_READ_ONLY if read_only else 0
    else:
        mt = DLManagedTensor()
    t = mt.dl_tensor
    t.data = lib.bk_buffer_data(h)
    t.device = DLDevice(kind, index)
    t.ndim = len(shape)
    t.dtype = DLDataType(DL_FLOAT, 32 if code == F32 else 64, 1)
    t.shape = cast(shape_arr, POINTER(c_int64))
    t.strides = None
    t.byte_offset = 0
    addr = addressof(mt)
    _EXPORTS[addr] = (mt, shape_arr, h, lib.bk_buffer_release)
    mt.deleter = _EXPORT_DELETER
    try:
        return _ffi.new_capsule(addr, versioned)
    except BaseException:
        _export_deleter(addr)
        raise


def _sync_default_for(buf: Buffer) -> None:
    """Wait for the calling thread's default context of buf's device.

    The public API has no handle to that context, but every call with a NULL
    context uses it: a one-element slice queued there, read back to the host
    (bk_buffer_to_host synchronizes), completes after everything queued before.
    """
    lib = load()
    n = buf._info()[1]
    if n == 0:
        return
    tmp = c_void_p()
    with _Using("Buffer", (buf, "the buffer")):
        check(lib.bk_vec_slice(None, buf._h, n, 0, 1, byref(tmp)))
    try:
        scratch = (c_double * 1)()
        check(lib.bk_buffer_to_host(None, tmp.value, scratch, 1))
    finally:
        lib.bk_buffer_release(tmp.value)


_new_buffer = object.__new__


def wrap_result(handle, key, shape=None, verify=False) -> Buffer:
    """A Buffer for a fresh result made on context `key` (a Context, DEFAULT
    or None); `shape` is checked against the length when `verify`."""
    if type(key) is Context:
        pending = key if key._kind == DL_CUDA else None
    elif key is DEFAULT and handle and _ffi._lib.bk_buffer_device(handle).kind == DL_CUDA:
        pending = DEFAULT
    else:
        pending = None
    if verify and shape is not None and _prod(shape) != _ffi._lib.bk_buffer_length(handle):
        shape = None
    self = _new_buffer(Buffer)
    self._h = handle
    self._pending = pending
    self._shape = shape
    self._uses = 0
    self._doomed = None
    self._meta = None
    return self


# ---------------------------------------------------------------------------
# Constructors and the conversion rule
# ---------------------------------------------------------------------------


def _shape_arg(shape) -> Tuple[int, ...]:
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def zeros(shape: Union[int, Sequence[int]], dtype: DtypeLike = "float32", ctx: Any = None) -> Buffer:
    """A buffer of zeros of `shape` (an int or a tuple) and `dtype` on ctx's
    device (None: the CPU).

    Raises InvalidArgumentError (a negative extent), DtypeError (not float32
    or float64), OutOfMemoryError. Example: ``bufkern.zeros((2, 3), "f8")``.
    """
    shape = _shape_arg(shape)
    code = dtype_code(dtype, "bufkern.zeros")
    c, key = ctx_handle(ctx, "bufkern.zeros")
    length = _prod(shape) if all(d >= 0 for d in shape) else min(shape)
    out = c_void_p()
    with _Using("bufkern.zeros", (c, "ctx")):
        check(load().bk_buffer_zeros(c._h if c else None, code, _i64(length, "length", "bufkern.zeros"), byref(out)))
    return wrap_result(out.value, key if key is not DEFAULT else None, shape, verify=True)


def _np_dtype(code: int, fn: str) -> np.dtype:
    dt = _NUMPY_DTYPES.get(code)
    if dt is None:
        raise DtypeError(_ffi.ERR_DTYPE, f"{fn}: dtype {dtype_name(code)} is not float32 or float64")
    return dt


def _host_copy(arr: np.ndarray, c: Optional[Context], key) -> Buffer:
    """A new buffer on c's device with a copy of a native float32/float64 array."""
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    code = F32 if arr.dtype == np.float32 else F64
    out = c_void_p()
    with _Using("bufkern.from_numpy", (c, "ctx")):
        check(load().bk_buffer_from_host(c._h if c else None, code, arr.ctypes.data if arr.size else None,
                                         arr.size, byref(out)))
    return wrap_result(out.value, key if key is not DEFAULT else None, arr.shape)


def _float_array(arr: np.ndarray, dtype: Optional[int], default: int, name: str, fn: str) -> np.ndarray:
    """arr as a native float32/float64 array by the conversion rule: floats
    keep their dtype (or take `dtype`), integers and booleans take `dtype` or
    `default`, anything else is a DtypeError."""
    kind = arr.dtype.kind
    if kind not in "biuf" or (kind == "f" and dtype is None and arr.dtype.itemsize not in (4, 8)):
        raise DtypeError(
            _ffi.ERR_DTYPE,
            f"{fn}: {name} has dtype {arr.dtype.name}; bufkern computes in float32 and float64 "
            "(integer and boolean data is converted, other dtypes are not: convert it first)",
        )
    if dtype is not None:
        want = _np_dtype(dtype, fn)
    elif kind == "f":
        want = np.dtype(np.float32 if arr.dtype.itemsize == 4 else np.float64)
    else:
        want = _np_dtype(default, fn)
    return arr if arr.dtype == want else arr.astype(want)


def from_numpy(array: Any, ctx: Any = None, dtype: Optional[DtypeLike] = None) -> Buffer:
    """A new buffer holding a copy of `array` (a numpy array or anything
    np.asarray reads: lists, scalars, buffer-protocol objects) on ctx's
    device (None: the CPU), with its shape.

    dtype (a name, numpy dtype or torch dtype) converts the data; without it
    float32 and float64 data keep their dtype and integer, boolean and
    Python numbers become float64. Raises DtypeError for other dtypes
    (complex, float16, strings) naming them.

    Example: ``bufkern.from_numpy(np.arange(6).reshape(2, 3))`` is a float64
    (2, 3) buffer.
    """
    fn = "bufkern.from_numpy"
    code = None if dtype is None else dtype_code(dtype, fn)
    c, key = ctx_handle(ctx, fn)
    if is_torch_tensor(array):
        array = array.detach().cpu().numpy()
    try:
        arr = np.asarray(array)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fn}: cannot read an array from {type(array).__name__}") from exc
    return _host_copy(_float_array(arr, code, F64, "array", fn), c, key)


def _dlpack_capsule(obj, key, stream):
    """The capsule of a DLPack producer: a versioned one when it can make it."""
    export = obj.__dlpack__
    dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (DL_CPU, 0)
    kwargs = {}
    wait_index = None
    if int(dev[0]) == DL_CUDA:
        if stream is not None:
            kwargs["stream"] = int(stream)
        elif type(key) is Context and key._stream is not None:
            kwargs["stream"] = key._stream
        else:
            kwargs["stream"], wait_index = 1, int(dev[1])
    try:
        capsule = export(max_version=_ffi.DLPACK_VERSION, **kwargs)
    except TypeError:
        # A producer of the DLPack 0.x protocol (no max_version keyword).
        capsule = export(**kwargs)
    if wait_index is not None:
        wait_legacy_stream(wait_index)
    return capsule


# Legacy views of imported versioned tensors, by address: the view and the
# versioned tensor it stands for (whose deleter the view's deleter runs).
_IMPORTS = _ffi.immortal({})


def _import_deleter(addr, _imports=_IMPORTS):
    entry = _imports.pop(addr, None)
    if entry is not None:
        vaddr = entry[1]
        v = DLManagedTensorVersioned.from_address(vaddr)
        if v.deleter:
            v.deleter(vaddr)


_IMPORT_DELETER = _ffi.immortal(_ffi.DLDeleter(_import_deleter))


def from_dlpack(obj: Any, ctx: Any = None, stream: Optional[int] = None) -> Buffer:
    """A buffer sharing memory with a DLPack producer (a torch tensor, a numpy
    array, a Buffer, or a "dltensor" / "dltensor_versioned" capsule); no copy
    is made and the producer's shape is kept.

    Accepted: float32/float64, CPU or CUDA, a compact row-major layout.
    Raises DtypeError naming any other dtype ("float16", "int64"),
    InvalidArgumentError (a strided layout: use ``bufkern.as_buffer``, which
    copies), UnsupportedError (another device), DeviceMismatchError (ctx on
    another device), BufferError (a consumed capsule). bufkern never writes
    into the memory; the producer must not write into it while bufkern may
    read it.

    For a CUDA producer, `stream` (default: ctx's stream set with
    Context.set_stream) is passed to ``obj.__dlpack__`` so the producer orders
    its pending work before that stream. When no stream is known the producer
    is ordered against the legacy default stream and that stream is waited
    for once from the host. A capsule passed directly is used as is.

    Example: ``b = bufkern.from_dlpack(torch.ones(2, 3)); b.shape == (2, 3)``.
    """
    fn = "bufkern.from_dlpack"
    c, key = ctx_handle(ctx, fn)
    if type(obj) is Buffer:
        if c is not None and (c._kind, c._index) != obj._device_pair:
            raise _ffi.DeviceMismatchError(
                _ffi.ERR_DEVICE_MISMATCH, f"{fn}: the buffer is on {obj.device}, ctx on {c.device}"
            )
        return obj.retain()
    if _ffi.is_capsule(obj):
        capsule = obj
    else:
        if getattr(obj, "__dlpack__", None) is None:
            raise TypeError(f"{fn}: {type(obj).__name__} object has no __dlpack__ method")
        capsule = _dlpack_capsule(obj, key, stream)
    ptr, versioned = _ffi.capsule_pointer(capsule)
    if versioned:
        v = DLManagedTensorVersioned.from_address(ptr)
        if v.version.major != 1:
            raise BufferError(
                f"{fn}: the tensor is DLPack {v.version.major}.{v.version.minor}; bufkern reads DLPack 1.x"
            )
        tensor = v.dl_tensor
    else:
        tensor = DLManagedTensor.from_address(ptr).dl_tensor
    dt = tensor.dtype
    if not (dt.code == DL_FLOAT and dt.bits in (32, 64) and dt.lanes == 1):
        raise DtypeError(
            _ffi.ERR_DTYPE,
            f"{fn}: the tensor has dtype {_ffi.dl_dtype_name(dt.code, dt.bits, dt.lanes)}, not float32 or float64",
        )
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim)) if 0 < ndim <= 64 and tensor.shape else ()
    managed = ptr
    if versioned:
        view = DLManagedTensor()
        view.dl_tensor = tensor
        managed = addressof(view)
        _IMPORTS[managed] = (view, ptr)
        view.deleter = _IMPORT_DELETER
    out = c_void_p()
    with _Using(fn, (c, "ctx")):
        status = load().bk_buffer_from_dlpack(c._h if c else None, managed, byref(out))
    if status:
        # Ownership stays with the capsule: drop the view without its deleter.
        _IMPORTS.pop(managed, None)
        check(status)
    # From here on the buffer owns the tensor; the renamed capsule's
    # destructor leaves it alone.
    _ffi.mark_consumed(capsule, versioned)
    return Buffer._wrap(out.value, None, shape)


def _torch_input(t, c: Optional[Context], default: int, name: str, fn: str) -> Buffer:
    torch = sys.modules["torch"]
    t = t.detach()
    if t.dtype not in (torch.float32, torch.float64):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            raise DtypeError(
                _ffi.ERR_DTYPE,
                f"{fn}: {name} has dtype {str(t.dtype)[len('torch.'):]}; bufkern computes in float32 and "
                "float64 (integer and boolean tensors are converted, other dtypes are not: convert it first)",
            )
        t = t.to(torch.float32 if default == F32 else torch.float64)
    if c is not None and (t.device.type, t.device.index or 0) != ("cpu" if c._kind == DL_CPU else "cuda", c._index):
        t = t.to(c.device)
    if not t.is_contiguous():
        t = t.contiguous()
    return from_dlpack(t, c)


def input_dtype(x) -> Optional[int]:
    """The dtype code an input brings to a call: that of a Buffer or of float32
    / float64 array data; None for data without a float dtype of its own."""
    if type(x) is Buffer:
        return x._info()[0] if x._h is not None else None
    dt = getattr(x, "dtype", None)
    if dt is None:
        return None
    if isinstance(x, np.ndarray):
        return {4: F32, 8: F64}.get(dt.itemsize) if dt.kind == "f" else None
    torch = _torch()
    if torch is not None and isinstance(dt, torch.dtype):
        return {torch.float32: F32, torch.float64: F64}.get(dt)
    return None


def as_buffer(x: Any, ctx: Any = None, name: str = "x", fn: str = "bufkern", default: Optional[int] = None) -> Buffer:
    """x as a Buffer by the conversion rule every primitive applies:

    - a Buffer is used as it is;
    - float32 and float64 data with a dtype of its own (numpy arrays, torch
      tensors, DLPack and buffer-protocol objects) keeps its dtype; integer
      and boolean data, and Python lists and numbers, take `default` (the
      dtype of the call's other inputs; float64 when none has one);
      any other dtype is a DtypeError naming it;
    - the data is shared without a copy when it is compact row-major on
      ctx's device (numpy arrays: also writable and native byte order);
      otherwise (strided, transposed, big-endian, converted, or on another
      device than ctx's) it is copied into a new compact buffer there.
    """
    if type(x) is Buffer:
        return x
    c, key = ctx_handle(ctx, fn)
    if default is None:
        default = F64
    if is_torch_tensor(x):
        return _torch_input(x, c, default, name, fn)
    gpu_ctx = c is not None and c._kind != DL_CPU
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        try:
            return from_dlpack(x, c)
        except (DtypeError, InvalidArgumentError, BufferError):
            dev = x.__dlpack_device__() if hasattr(x, "__dlpack_device__") else (DL_CPU, 0)
            if int(dev[0]) != DL_CPU:
                raise
            x = np.from_dlpack(x)
    if isinstance(x, np.ndarray):
        arr = _float_array(x, None, default, name, fn)
        if arr is x and not gpu_ctx and x.flags.c_contiguous and x.flags.writeable and x.dtype.isnative:
            return from_dlpack(x, c)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        return _host_copy(arr, c, key)
    if isinstance(x, (list, tuple, numbers.Number)):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{fn}: {name} is not an array-like ({exc})") from exc
        if arr.dtype.kind == "f":
            arr = arr.astype(_np_dtype(default, fn))
        return _host_copy(_float_array(arr, None, default, name, fn), c, key)
    try:
        arr = np.asarray(memoryview(x))
    except TypeError:
        raise TypeError(
            f"{fn}: {name} must be a bufkern.Buffer, an array (numpy, torch, DLPack, buffer protocol) "
            f"or a list, got {type(x).__name__}"
        ) from None
    arr = _float_array(arr, None, default, name, fn)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return _host_copy(arr, c, key)


# ---------------------------------------------------------------------------
# Argument conversion shared with the primitives
# ---------------------------------------------------------------------------

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _i64(v, name, fn) -> int:
    if type(v) is not int:
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            v = int(v)
        else:
            raise TypeError(f"{fn}: {name} must be an integer, got {type(v).__name__}")
    if v < _I64_MIN or v > _I64_MAX:
        raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name} = {v} does not fit in int64")
    return v


def _cint(v, name, fn) -> int:
    if type(v) is not int:
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            v = int(v)
        else:
            raise TypeError(f"{fn}: {name} must be an integer, got {type(v).__name__}")
    if v < _INT_MIN or v > _INT_MAX:
        raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name} = {v} does not fit in a C int")
    return v

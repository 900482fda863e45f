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
import threading
from ctypes import byref, c_double, c_void_p

import numpy as np

from . import _ffi
from ._ffi import (
    DL_CPU,
    DL_CUDA,
    BkDevice,
    DLManagedTensor,
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
    "float64": F64,
    "f64": F64,
    "bfloat16": BF16,
    "bf16": BF16,
    "float16": F16,
    "f16": F16,
}
_NUMPY_DTYPES = {F32: np.dtype(np.float32), F64: np.dtype(np.float64)}
_DTYPE_NAMES = {F32: "float32", F64: "float64", BF16: "bfloat16", F16: "float16"}


def dtype_code(dtype) -> int:
    """The bk_dtype code of a dtype given as a name, numpy dtype or code."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    if isinstance(dtype, str):
        try:
            return _DTYPE_CODES[dtype.lower()]
        except KeyError:
            pass
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name in _DTYPE_CODES:
            return _DTYPE_CODES[name]
    raise _ffi.DtypeError(_ffi.ERR_DTYPE, f"bufkern: dtype {dtype!r} is not one of float32, float64")


def parse_device(device):
    """(kind, index) with the DLPack codes from "cpu", "cuda", "cuda:N", a
    (kind, index) pair, or an object with .type and .index (torch.device)."""
    if isinstance(device, str):
        text = device.strip().lower()
        name, _, idx = text.partition(":")
        if name in ("cpu", "cuda"):
            try:
                index = int(idx) if idx else 0
            except ValueError:
                index = None
            if index is not None:
                return (DL_CPU if name == "cpu" else DL_CUDA), index
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT, f"bufkern: device {device!r} is not 'cpu', 'cuda' or 'cuda:N'"
        )
    if isinstance(device, tuple) and len(device) == 2:
        kind, index = device
        if isinstance(kind, str):
            kind = {"cpu": DL_CPU, "cuda": DL_CUDA}.get(kind.lower(), -1)
        return int(kind), int(index)
    if hasattr(device, "type") and hasattr(device, "index"):
        return parse_device(f"{device.type}:{device.index or 0}")
    raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"bufkern: cannot read a device from {device!r}")


def device_name(kind: int, index: int) -> str:
    if kind == DL_CPU:
        return "cpu"
    if kind == DL_CUDA:
        return f"cuda:{index}"
    return f"device({kind}, {index})"


# ---------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------


class _DefaultContext:
    """Marks work queued on the calling thread's default context (ctx=None)."""

    __slots__ = ()

    def __repr__(self):
        return "<bufkern thread default context>"


DEFAULT = _DefaultContext()


class Context:
    """A bufkern context: a device, its stream, library handles and caches.

    ``Context("cpu")``, ``Context("cuda:0")``. A context is used by one thread
    at a time. Functions taking ``ctx=None`` use the calling thread's default
    context for the inputs' device instead.
    """

    __slots__ = ("_h", "_kind", "_index", "_stream", "__weakref__")

    def __init__(self, device="cpu"):
        kind, index = parse_device(device)
        lib = load()
        out = c_void_p()
        self._h = None
        self._kind, self._index = kind, index
        self._stream = None
        check(lib.bk_context_create(BkDevice(kind, index), byref(out)))
        self._h = out.value

    def _handle(self):
        h = self._h
        if h is None:
            raise ValueError("bufkern: the context is closed")
        return h

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        return device_name(self._kind, self._index)

    @property
    def is_cuda(self) -> bool:
        return self._kind == DL_CUDA

    @property
    def stream(self):
        """The cudaStream_t handle set with set_stream (None: the context's own
        stream). The legacy default stream reads as 1."""
        return self._stream

    def set_stream(self, stream) -> None:
        """Queue this context's work on a caller's CUDA stream (an integer
        cudaStream_t handle, e.g. ``torch.cuda.current_stream().cuda_stream``).

        0 means the legacy default stream (as PyTorch reports it) and is passed
        to CUDA as cudaStreamLegacy (1); 2 is the per-thread default stream;
        None goes back to the context's own non-blocking stream. The caller
        keeps the stream alive while the context and its buffers are in use.
        Work already queued on the previous stream completes first.
        """
        lib = load()
        if stream is None:
            handle = None
        else:
            if not isinstance(stream, numbers.Integral) or isinstance(stream, bool):
                raise TypeError(f"Context.set_stream: stream must be an int handle or None, got {stream!r}")
            handle = int(stream)
            if handle < 0:
                raise InvalidArgumentError(
                    _ffi.ERR_INVALID_ARGUMENT, f"Context.set_stream: stream = {handle} is negative"
                )
            if handle == 0:
                handle = 1
        check(lib.bk_context_set_stream(self._handle(), handle))
        self._stream = handle

    def synchronize(self) -> None:
        """Wait until all work queued on the context has completed."""
        check(load().bk_context_synchronize(self._handle()))

    def close(self) -> None:
        """Wait for the context's queued work and release it. Buffers it made
        stay valid (they keep what they need of the context alive)."""
        h = self._h
        if h is None:
            return
        lib = load()
        try:
            lib.bk_context_synchronize(h)
        finally:
            self._h = None
            lib.bk_context_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
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


def ctx_handle(ctx, fn="bufkern"):
    """(C handle, ordering key) for a ctx argument (None: thread default)."""
    if ctx is None:
        return None, DEFAULT
    if type(ctx) is not Context:
        raise TypeError(f"{fn}: ctx must be a bufkern.Context or None, got {type(ctx).__name__}")
    h = ctx._h
    if h is None:
        raise ValueError(f"{fn}: the context is closed")
    return h, ctx


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


_tls = threading.local()


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


class Buffer:
    """A reference to a bufkern buffer: a flat, immutable, contiguous array
    with a dtype, a length and a device.

    ``shape`` is a hint kept by the binding (buffers themselves are flat): it
    is the numpy shape for buffers made from arrays, the natural result shape
    for primitive results, and is used by ``numpy()``. It never affects a
    call: primitives take their geometry explicitly.

    The reference is dropped by ``close()`` (or ``with``), or when the object is
    garbage collected. ``retain()`` returns a second, independent reference.
    """

    __slots__ = ("_h", "_pending", "_shape", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "bufkern.Buffer is not built directly: use bufkern.from_numpy, bufkern.zeros, "
            "bufkern.from_dlpack or a primitive"
        )

    @classmethod
    def _wrap(cls, handle, pending=None, shape=None):
        self = object.__new__(cls)
        self._h = handle
        self._pending = pending
        self._shape = shape
        return self

    # -- lifetime -------------------------------------------------------------

    def _handle(self):
        h = self._h
        if h is None:
            raise ValueError("bufkern: the buffer is closed")
        return h

    def close(self) -> None:
        """Drop this reference (the memory goes with the last one)."""
        h = self._h
        if h is not None:
            self._h = None
            load().bk_buffer_release(h)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h is not None and _ffi is not None and _ffi._lib is not None:
            self._h = None
            try:
                _ffi._lib.bk_buffer_release(h)
            except Exception:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self) -> bool:
        return self._h is None

    def retain(self) -> "Buffer":
        """A new Buffer object holding another reference to the same buffer."""
        h = load().bk_buffer_retain(self._handle())
        return Buffer._wrap(h, self._pending, self._shape)

    # -- properties -------------------------------------------------------------

    @property
    def dtype(self) -> np.dtype:
        return _NUMPY_DTYPES[load().bk_buffer_dtype(self._handle())]

    @property
    def length(self) -> int:
        return int(load().bk_buffer_length(self._handle()))

    size = length

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.itemsize

    @property
    def shape(self) -> tuple:
        s = self._shape
        return s if s is not None else (self.length,)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def _device_pair(self):
        d = load().bk_buffer_device(self._handle())
        return int(d.kind), int(d.index)

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
        return load().bk_buffer_data(self._handle()) or 0

    def reshape(self, *shape) -> "Buffer":
        """A new reference with another shape hint (same memory, same length)."""
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
        return (
            f"<bufkern.Buffer {self.dtype.name} length={self.length} shape={self.shape} "
            f"device={self.device}>"
        )

    # -- ordering ----------------------------------------------------------------

    def _settle(self) -> None:
        """Wait until the work that produces this buffer has completed."""
        p = self._pending
        if p is None:
            return
        if p is DEFAULT:
            _sync_default_for(self._handle())
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

        copy=True (default) copies to fresh host memory (from any device).
        copy=False returns a read-only view of a CPU buffer's memory without
        copying (it keeps the buffer alive).
        """
        h = self._handle()
        if not copy:
            if self.is_cuda:
                raise BufferError("Buffer.numpy(copy=False): the buffer is on a GPU; use copy=True")
            arr = np.from_dlpack(self)
            arr.flags.writeable = False
            return arr.reshape(self.shape)
        lib = load()
        n = int(lib.bk_buffer_length(h))
        arr = np.empty(n, dtype=_NUMPY_DTYPES[lib.bk_buffer_dtype(h)])
        p = self._pending
        ctx_h = p._h if type(p) is Context and p._h is not None else None
        check(lib.bk_buffer_to_host(ctx_h, h, arr.ctypes.data if n else None, n))
        self._pending = None
        return arr.reshape(self.shape)

    def tolist(self):
        return self.numpy().tolist()

    def item(self) -> float:
        """The single element of a length-1 buffer, as a Python float."""
        if self.length != 1:
            raise ValueError(f"Buffer.item: the buffer has {self.length} elements, not 1")
        return float(self.numpy().reshape(-1)[0])

    def __float__(self):
        return self.item()

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def copy(self, ctx=None) -> "Buffer":
        """A copy on ctx's device (ctx None: the CPU)."""
        h = self._handle()
        ctx_h, key = ctx_handle(ctx, "Buffer.copy")
        self._order_for(key)
        if key is DEFAULT or not key.is_cuda:
            # The copy into host memory may read the buffer from another
            # stream than the one that produced it.
            self._settle()
        out = c_void_p()
        check(load().bk_buffer_copy(ctx_h, h, byref(out)))
        pending = key if type(key) is Context and key.is_cuda else None
        return Buffer._wrap(out.value, pending, self._shape)

    def cpu(self) -> "Buffer":
        """This buffer when on the CPU, else a CPU copy."""
        if not self.is_cuda:
            return self.retain()
        return self.copy(None)

    # -- DLPack ----------------------------------------------------------------------

    def __dlpack_device__(self):
        return self._device_pair

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export as a 1-D DLPack tensor ("dltensor" capsule) sharing memory.

        The consumer must not write into it: buffers are immutable. For a GPU
        buffer the data is made ready for the consumer's ``stream`` (None: the
        legacy default stream; -1: no ordering). ``max_version`` is accepted
        and a legacy (unversioned) capsule is returned, as the protocol allows.
        ``dl_device`` = the CPU on a GPU buffer, or ``copy=True``, export a
        copy; ``copy=False`` with another ``dl_device`` raises BufferError.
        """
        self._handle()
        target = self
        kind, index = self._device_pair
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
                target = self.copy(None)
                kind, index = DL_CPU, 0
        if copy is True and target is self:
            target = _clone_same_device(self)
        if kind == DL_CUDA and stream != -1:
            consumer = 1 if stream is None or stream == 0 else int(stream)
            if not _stream_matches(target._pending, consumer):
                target._settle()
        mt = c_void_p()
        check(load().bk_buffer_to_dlpack(target._handle(), byref(mt)))
        try:
            return _ffi.new_capsule(mt.value)
        except BaseException:
            managed = DLManagedTensor.from_address(mt.value)
            managed.deleter(mt.value)
            raise


def _clone_same_device(buf: Buffer) -> Buffer:
    lib = load()
    h = buf._handle()
    n = int(lib.bk_buffer_length(h))
    buf._settle()
    out = c_void_p()
    if buf.is_cuda:
        check(lib.bk_vec_slice(None, h, n, 0, n, byref(out)))
        return Buffer._wrap(out.value, DEFAULT, buf._shape)
    check(lib.bk_buffer_copy(None, h, byref(out)))
    return Buffer._wrap(out.value, None, buf._shape)


def _sync_default_for(h) -> None:
    """Wait for the calling thread's default context of h's device.

    The public API has no handle to that context, but every call with a NULL
    context uses it: a one-element slice queued there, read back to the host
    (bk_buffer_to_host synchronizes), completes after everything queued before.
    """
    lib = load()
    n = int(lib.bk_buffer_length(h))
    if n == 0:
        return
    tmp = c_void_p()
    check(lib.bk_vec_slice(None, h, n, 0, 1, byref(tmp)))
    try:
        scratch = (c_double * 1)()
        check(lib.bk_buffer_to_host(None, tmp.value, scratch, 1))
    finally:
        lib.bk_buffer_release(tmp.value)


_new_buffer = object.__new__


def wrap_result(handle, key, shape=None, verify=False) -> Buffer:
    """A Buffer for a fresh result made on context `key` (a Context, DEFAULT
    or None); `shape` is the hint, checked against the length when `verify`."""
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
    return self


# ---------------------------------------------------------------------------
# Constructors
# ---------------------------------------------------------------------------


def _shape_arg(shape):
    if isinstance(shape, numbers.Integral):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def zeros(shape, dtype="float32", ctx=None) -> Buffer:
    """A buffer of zeros with `shape` (an int length or a tuple) on ctx's
    device (ctx None: the CPU)."""
    shape = _shape_arg(shape)
    code = dtype_code(dtype)
    ctx_h, key = ctx_handle(ctx, "bufkern.zeros")
    length = _prod(shape) if all(d >= 0 for d in shape) else min(shape)
    out = c_void_p()
    check(load().bk_buffer_zeros(ctx_h, code, _i64(length, "length", "bufkern.zeros"), byref(out)))
    return wrap_result(out.value, key if key is not DEFAULT else None, shape, verify=True)


def from_numpy(array, ctx=None, dtype=None) -> Buffer:
    """A new buffer holding a copy of a numpy array (or anything np.asarray
    takes) on ctx's device (ctx None: the CPU).

    float32 and float64 arrays keep their dtype; pass ``dtype`` to convert
    other arrays (lists default to float64). The shape is kept as the hint.
    """
    if dtype is not None:
        np_dtype = _NUMPY_DTYPES.get(dtype_code(dtype))
        if np_dtype is None:
            raise _ffi.DtypeError(_ffi.ERR_DTYPE, f"bufkern.from_numpy: dtype {dtype!r} is not float32 or float64")
        arr = np.asarray(array, dtype=np_dtype, order="C")
    elif isinstance(array, np.ndarray):
        if array.dtype not in (np.float32, np.float64):
            raise _ffi.DtypeError(
                _ffi.ERR_DTYPE,
                f"bufkern.from_numpy: array dtype {array.dtype} is not float32 or float64 "
                "(pass dtype= to convert)",
            )
        arr = np.asarray(array, order="C")
    else:
        arr = np.asarray(array)
        if arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
        arr = np.asarray(arr, order="C")
    ctx_h, key = ctx_handle(ctx, "bufkern.from_numpy")
    code = F32 if arr.dtype == np.float32 else F64
    out = c_void_p()
    check(load().bk_buffer_from_host(ctx_h, code, arr.ctypes.data if arr.size else None, arr.size, byref(out)))
    return wrap_result(out.value, key if key is not DEFAULT else None, arr.shape)


def from_dlpack(obj, ctx=None, stream=None) -> Buffer:
    """A buffer sharing memory with a DLPack producer (a torch tensor, a numpy
    array, a Buffer, or a legacy "dltensor" capsule); no copy is made.

    Accepted: float32/float64, CPU or CUDA, compact row-major layout (else
    InvalidArgumentError / DtypeError / UnsupportedError). The buffer is flat;
    its shape hint is the producer's shape. bufkern never writes into it, and
    the producer must not write into it while bufkern may read it.

    For a CUDA producer, `stream` (default: ctx's stream set with
    Context.set_stream) is passed to ``obj.__dlpack__`` so the producer orders
    its pending work before that stream. When no stream is known the producer
    is ordered against the legacy default stream and that stream is waited for
    once from the host. A capsule passed directly is used as is.
    """
    ctx_h, key = ctx_handle(ctx, "bufkern.from_dlpack")
    if _ffi.is_capsule(obj):
        capsule = obj
    else:
        export = getattr(obj, "__dlpack__", None)
        if export is None:
            raise TypeError(
                f"bufkern.from_dlpack: {type(obj).__name__} object has no __dlpack__ method"
            )
        dev = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (DL_CPU, 0)
        dev_kind, dev_index = int(dev[0]), int(dev[1])
        if dev_kind == DL_CUDA:
            wait_after = False
            if stream is not None:
                s = int(stream)
            elif type(key) is Context and key._stream is not None:
                s = key._stream
            else:
                s, wait_after = 1, True
            capsule = export(stream=s)
            if wait_after:
                wait_legacy_stream(dev_index)
        else:
            capsule = export()
    ptr = _ffi.capsule_pointer(capsule)
    tensor = DLManagedTensor.from_address(ptr).dl_tensor
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim)) if 0 < ndim <= 64 and tensor.shape else ()
    out = c_void_p()
    check(load().bk_buffer_from_dlpack(ctx_h, ptr, byref(out)))
    # From here on the buffer owns the tensor; the renamed capsule's
    # destructor leaves it alone.
    _ffi.mark_consumed(capsule)
    return Buffer._wrap(out.value, None, shape)


def as_buffer(x, ctx=None, name="x", fn="bufkern") -> Buffer:
    """x itself when a Buffer; a zero-copy import for a DLPack producer (a
    torch tensor, a numpy array that can export); else a copy of np.asarray(x)."""
    if type(x) is Buffer:
        return x
    if isinstance(x, np.ndarray):
        if x.dtype in (np.float32, np.float64) and x.flags.c_contiguous and x.flags.writeable:
            if ctx is None or not ctx.is_cuda:
                return from_dlpack(x, ctx)
        return from_numpy(x, ctx)
    if hasattr(x, "__dlpack__"):
        return from_dlpack(x, ctx)
    try:
        return from_numpy(x, ctx)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{fn}: {name} must be a bufkern.Buffer or array-like, got {type(x).__name__}") from exc


# ---------------------------------------------------------------------------
# Argument conversion shared with the primitives
# ---------------------------------------------------------------------------

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _i64(v, name, fn) -> int:
    if type(v) is not int:
        if isinstance(v, numbers.Integral):
            v = int(v)
        else:
            raise TypeError(f"{fn}: {name} must be an integer, got {type(v).__name__}")
    if v < _I64_MIN or v > _I64_MAX:
        raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name} = {v} does not fit in int64")
    return v


def _cint(v, name, fn) -> int:
    if type(v) is not int:
        if isinstance(v, numbers.Integral):
            v = int(v)
        else:
            raise TypeError(f"{fn}: {name} must be an integer, got {type(v).__name__}")
    if v < _INT_MIN or v > _INT_MAX:
        raise InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name} = {v} does not fit in a C int")
    return v

"""The primitives, one Python function per C function of include/bufkern.h.

Conventions (the same for every function):

- Inputs are array-likes with shapes: ``bufkern.Buffer``s, numpy arrays,
  torch tensors (CPU or CUDA), DLPack and buffer-protocol objects, lists.
  Each is converted by the one rule of ``bufkern.as_buffer``: float32 and
  float64 data keep their dtype, integer and boolean data and lists take the
  dtype of the call's other inputs (float64 when none has one), compact data
  on the call's device is shared, anything else is copied.
- Geometry is inferred from the inputs' shapes (``softmax(x, axis=-1)``).
  The C geometry stays available as keyword arguments with the C names
  (``dims=``, ``rows=``, ``cols=``, ``batch=``, ...), checked against the
  input's shape: it must describe that shape, or the input must be
  one-dimensional (a flat buffer) with as many elements.
- Axes may be negative, as numpy reads them.
- ``ctx`` (keyword) is a ``bufkern.Context``, a device string ("cpu",
  "cuda:0") or torch.device (the calling thread's own context for it), or
  None for the calling thread's default context of the inputs' device.
- Each result is a new Buffer with its shape; functions with several results
  return a tuple.
- Failures raise ``bufkern.Error`` subclasses carrying the status and the
  message (the library's, or the binding's for checks made before the call).
"""

from __future__ import annotations

import numbers
from ctypes import POINTER, c_int, c_int64, c_uint64, c_void_p
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _ffi
from ._core import (
    DEFAULT,
    Buffer,
    Context,
    _cint,
    _i64,
    _prod,
    as_buffer,
    hold,
    input_dtype,
    is_torch_tensor,
    resolve_ctx,
    unhold,
    wrap_result,
)
from ._ffi import InvalidArgumentError, check

ArrayLike = Any
"""A Buffer, numpy array, torch tensor, DLPack or buffer-protocol object, or list."""

Shape = Tuple[int, ...]

_OUT = c_void_p


def _bad(fn, text):
    return InvalidArgumentError(_ffi.ERR_INVALID_ARGUMENT, f"{fn}: {text}")


# ---------------------------------------------------------------------------
# One call: inputs, geometry, the C function
# ---------------------------------------------------------------------------


def _take(fn, ctx, values, names):
    """(Context or None, buffers) for a call's inputs, converted by the rule
    of as_buffer (None stays None: an optional input, or a NULL the library
    reports)."""
    if ctx is not None and type(ctx) is not Context:
        ctx = resolve_ctx(ctx, fn)
    out = []
    default = None
    for v, name in zip(values, names):
        if v is None or type(v) is Buffer:
            out.append(v)
            continue
        if default is None:
            for w in values:
                default = input_dtype(w)
                if default is not None:
                    break
        out.append(as_buffer(v, ctx, name, fn, default))
    return ctx, out


_CFNS = {}


def _run(fn, cname, ctx, bufs, names, args, shapes, nout=1, flag=False, verify=False):
    """bk_<cname>(ctx, buffers..., args..., results...) with every buffer and
    the context held for the call; the results as Buffers with `shapes` (one
    shape, or a tuple of them with nout > 1)."""
    held = [b for b in bufs if b is not None]
    labels = [n for b, n in zip(bufs, names) if b is not None]
    if ctx is not None:
        held.append(ctx)
        labels.append("ctx")
    key = DEFAULT if ctx is None else ctx
    hold(held, labels, fn)
    try:
        handles = []
        for b in bufs:
            if b is None:
                handles.append(None)
                continue
            p = b._pending
            if p is not None and p is not key:
                b._order_for(key)
            handles.append(b._h)
        cfn = _CFNS.get(cname)
        if cfn is None:
            cfn = _CFNS[cname] = getattr(_ffi.load(), cname)
        outs = [_OUT() for _ in range(nout)]
        if flag:
            f = c_int(0)
            status = cfn(None if ctx is None else ctx._h, *handles, *args, *outs, f)
        else:
            status = cfn(None if ctx is None else ctx._h, *handles, *args, *outs)
    finally:
        unhold(held)
    if status:
        check(status)
    if nout == 1:
        r = wrap_result(outs[0].value, key, shapes, verify)
        return (r, bool(f.value)) if flag else r
    return tuple(wrap_result(o.value, key, s) for o, s in zip(outs, shapes))


def _ints(seq, name, fn) -> Shape:
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{fn}: {name} must be a sequence of integers, got {type(seq).__name__}")
    return tuple(_i64(v, f"{name}[{i}]", fn) for i, v in enumerate(seq))


def _carray(vals):
    """(ctypes int64 array, count) for a tuple of ints."""
    return (c_int64 * max(len(vals), 1))(*vals), len(vals)


def _describes(shape, dims) -> bool:
    return tuple(shape) == tuple(dims) or (len(shape) == 1 and _prod(dims) == shape[0])


def _geometry(x, dims, name, fn, arg="x") -> Shape:
    """The tensor shape of input x: its shape, or `dims` checked against it."""
    shape = x.shape if x is not None else None
    if dims is None:
        if shape is None:
            raise TypeError(f"{fn}: {name} is required when {arg} is None")
        return shape
    dims = _ints(dims, name, fn)
    if shape is not None and not _describes(shape, dims) and all(d >= 0 for d in dims) and _prod(dims) == _prod(shape):
        raise _bad(fn, f"{name} = {dims} does not describe {arg} of shape {shape}")
    return dims


def _axis(axis, rank, name, fn, shape) -> int:
    """axis in [-rank, rank) as numpy reads it, made non-negative; a rank-0
    tensor takes 0 or -1 (the library decides whether rank 0 is valid)."""
    axis = _cint(axis, name, fn)
    if rank == 0:
        if axis in (0, -1):
            return 0
        raise _bad(fn, f"{name} = {axis} is outside [-1, 1) for a tensor of shape ()")
    if not -rank <= axis < rank:
        raise _bad(fn, f"{name} = {axis} is outside [{-rank}, {rank}) for shape {tuple(shape)}")
    return axis + rank if axis < 0 else axis


def _matrix(x, rows, cols, fn, arg="x", names=("rows", "cols")):
    """(rows, cols, lead) of input x read as a matrix of rows of its last
    axis: inferred from the shape (rows = the product of the leading axes),
    or the keywords checked against it (a flat x may take any rows * cols
    = its length; one keyword given, the other follows). lead is the shape of
    one value per row: x.shape[:-1], or (rows,) for explicit geometry on a
    flat input."""
    shape = x.shape if x is not None else (0,)
    rn, cn = names
    r = None if rows is None else _i64(rows, rn, fn)
    c = None if cols is None else _i64(cols, cn, fn)
    inferred = (_prod(shape[:-1]), shape[-1]) if shape else (1, 1)
    if r is None and c is None:
        return inferred[0], inferred[1], tuple(shape[:-1])
    if len(shape) == 1 and x is not None:
        n = shape[0]
        if c is None:
            c = n // r if r > 0 and n % r == 0 else -1
        if r is None:
            r = n // c if c > 0 and n % c == 0 else -1
        if r * c != n:
            raise _bad(fn, f"{rn} = {r}, {cn} = {c} do not describe {arg} of shape {tuple(shape)}")
        return r, c, (r,)
    if r is None:
        r = inferred[0]
    if c is None:
        c = inferred[1]
    if x is not None and (r, c) != inferred:
        raise _bad(fn, f"{rn} = {r}, {cn} = {c} do not describe {arg} of shape {tuple(shape)}")
    return r, c, tuple(shape[:-1])


def _expect(b, shape, name, fn):
    """Input b must have `shape`, or be flat with as many elements."""
    if b is not None and not _describes(b.shape, shape) and _prod(b.shape) == _prod(shape):
        raise _bad(fn, f"{name} has shape {b.shape}, expected {tuple(shape)}")


def _flag(v, name, fn) -> int:
    if isinstance(v, bool):
        return int(v)
    return _cint(v, name, fn)


def _float(v, name, fn) -> float:
    if type(v) is float:
        return v
    if not isinstance(v, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def _indices(idx, name, fn):
    """(pointer, k, array) for host indices: any integer array (numpy, torch,
    list); the array keeps the memory the pointer points into."""
    if is_torch_tensor(idx):
        idx = idx.detach().cpu().numpy()
    if isinstance(idx, Buffer):
        raise TypeError(f"{fn}: {name} must be host integers (a list, numpy or torch integer array), got a Buffer")
    if isinstance(idx, np.ndarray):
        arr = idx
    else:
        if isinstance(idx, (str, bytes)) or not hasattr(idx, "__len__"):
            raise TypeError(f"{fn}: {name} must be a sequence of integers, got {type(idx).__name__}")
        try:
            arr = np.asarray(idx)
        except (OverflowError, ValueError):
            arr = np.asarray(list(idx), dtype=object)
        if arr.size == 0:
            arr = arr.astype(np.uint64)
    if arr.ndim != 1:
        raise _bad(fn, f"{name} must be one-dimensional, got shape {arr.shape}")
    k = arr.shape[0]
    if arr.dtype == np.uint64:
        arr = np.ascontiguousarray(arr)
    elif arr.dtype.kind in "iub":
        if arr.dtype.kind == "i" and (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise _bad(fn, f"{name}[{i}] = {int(arr[i])} is negative")
        arr = np.ascontiguousarray(arr, dtype=np.uint64)
    elif arr.dtype == object:
        vals = []
        for i, v in enumerate(arr):
            if not isinstance(v, numbers.Integral):
                raise TypeError(f"{fn}: {name}[{i}] must be an integer, got {type(v).__name__}")
            v = int(v)
            if v < 0 or v >= 2**64:
                raise _bad(fn, f"{name}[{i}] = {v} is outside [0, 2**64)")
            vals.append(v)
        arr = np.array(vals, dtype=np.uint64)
    else:
        raise TypeError(f"{fn}: {name} must be integers, got dtype {arr.dtype.name}")
    if k == 0:
        return None, 0, arr
    return arr.ctypes.data_as(POINTER(c_uint64)), k, arr


# ---------------------------------------------------------------------------
# 3.1 Softmax
# ---------------------------------------------------------------------------


def softmax(x: ArrayLike, axis: int = -1, *, dims: Optional[Sequence[int]] = None, ctx: Any = None) -> Buffer:
    """Softmax along `axis`: y = exp(x - m) / sum(exp(x - m)) per fibre, m the
    fibre maximum (bk_softmax).

    x: any shape of rank 1..16, float32 or float64; the result has x's shape
    and dtype. axis may be negative. dims= gives the tensor shape for a flat
    x. A fibre holding NaN, +inf or only -inf gives NaN entries.

    Raises InvalidArgumentError (axis outside [-rank, rank), rank 0 or above
    16, dims not describing x), DtypeError, DeviceMismatchError.

    Example: ``bufkern.softmax([[1.0, 2.0], [3.0, 4.0]], axis=-1)``.
    """
    fn = "bufkern.softmax"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    shape = _geometry(x, dims, "dims", fn)
    a = _axis(axis, len(shape), "axis", fn, shape)
    return _run(fn, "bk_softmax", ctx, (x,), ("x",), (*_carray(shape), a), shape)


# ---------------------------------------------------------------------------
# 3.2, 3.3 Cross-entropies
# ---------------------------------------------------------------------------


def xent_weighted_mean(logits: ArrayLike, weights: ArrayLike, *, rows: Optional[int] = None,
                       cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Mean weighted logits cross-entropy over the rows of the last axis,
    L = mean_r sum_c w[r,c] * (lse_r - x[r,c]) (bk_xent_weighted_mean).

    logits, weights: the same shape (..., cols), one dtype. Result: a 0-d
    buffer (``.item()`` reads it). rows=, cols= give the geometry of flat
    inputs. Raises InvalidArgumentError (shapes), DtypeError.

    Example: ``bufkern.xent_weighted_mean([[0.0, 1.0]], [[1.0, 0.0]]).item()``.
    """
    fn = "bufkern.xent_weighted_mean"
    ctx, (x, w) = _take(fn, ctx, (logits, weights), ("logits", "weights"))
    r, c, lead = _matrix(x, rows, cols, fn, "logits")
    _expect(w, (*lead, c), "weights", fn)
    return _run(fn, "bk_xent_weighted_mean", ctx, (x, w), ("logits", "weights"), (r, c), ())


def xent_teacher(student: ArrayLike, teacher: ArrayLike, gradient: bool = False, *, rows: Optional[int] = None,
                 cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Fixed-teacher cross-entropy over the rows of the last axis
    (bk_xent_teacher): the loss (a 0-d buffer) or, with gradient=True, the
    student gradient (softmax(S) - softmax(T)) / rows with student's shape.

    student, teacher: the same shape (..., cols), one dtype. Raises
    InvalidArgumentError, DtypeError.

    Example: ``bufkern.xent_teacher(s, t, gradient=True).shape == s.shape``.
    """
    fn = "bufkern.xent_teacher"
    ctx, (s, t) = _take(fn, ctx, (student, teacher), ("student", "teacher"))
    r, c, lead = _matrix(s, rows, cols, fn, "student")
    _expect(t, (*lead, c), "teacher", fn)
    g = _flag(gradient, "gradient", fn)
    return _run(fn, "bk_xent_teacher", ctx, (s, t), ("student", "teacher"), (r, c, g),
                (*lead, c) if g == 1 else ())


# ---------------------------------------------------------------------------
# 3.4 Grouped convolution
# ---------------------------------------------------------------------------


def _per_axis(v, sr, name, fn, default):
    if v is None:
        return (default,) * sr
    if isinstance(v, numbers.Integral) and not isinstance(v, bool):
        return (_i64(v, name, fn),) * sr
    vals = _ints(v, name, fn)
    if len(vals) != sr:
        raise _bad(fn, f"{name} has {len(vals)} entries, expected spatial_rank = {sr}")
    return vals


def conv(input: ArrayLike, kernel: ArrayLike, bias: Optional[ArrayLike] = None, stride=1, padding=0,
         dilation=1, groups: int = 1, *, pad_before=None, pad_after=None, input_dims=None,
         kernel_dims=None, ctx: Any = None) -> Buffer:
    """Grouped convolution (cross-correlation) over a spatial suffix (bk_conv).

    input: (batch axes..., C_in, s_1..s_r); kernel: (C_out, C_in, k_1..k_r),
    dense over the input channels (output channel oc of group g reads only
    input channels of group g); bias: (C_out,) or None. The spatial rank r =
    kernel.ndim - 2 is 1, 2 or 3. stride, padding (both sides), dilation:
    an int or r ints; pad_before=, pad_after= pad asymmetrically.
    input_dims=, kernel_dims= give the geometry of flat inputs. Result:
    (batch axes..., C_out, out_1..out_r) with out = (padded - eff) // stride
    + 1, eff = (k - 1) * dilation + 1 (0 when padded < eff); for flat inputs
    (N, C_out, out...).

    Raises InvalidArgumentError (groups, channels, k, stride or dilation
    <= 0, negative padding, shapes), DtypeError.

    Example: ``bufkern.conv(np.ones((1, 1, 4)), np.ones((1, 1, 2)), padding=1)``
    is (1, 1, 5).
    """
    fn = "bufkern.conv"
    names = ("input", "kernel", "bias")
    ctx, (x, k, b) = _take(fn, ctx, (input, kernel, bias), names)
    kdims = _geometry(k, kernel_dims, "kernel_dims", fn, "kernel")
    idims = _geometry(x, input_dims, "input_dims", fn, "input")
    sr = len(kdims) - 2
    if sr < 1 or sr > 3:
        raise _bad(fn, f"kernel_dims has {len(kdims)} entries, so spatial_rank = {sr} is outside [1, 3]")
    st = _per_axis(stride, sr, "stride", fn, 1)
    pb = _per_axis(pad_before if pad_before is not None else padding, sr, "pad_before", fn, 0)
    pa = _per_axis(pad_after if pad_after is not None else padding, sr, "pad_after", fn, 0)
    dl = _per_axis(dilation, sr, "dilation", fn, 1)
    g = _i64(groups, "groups", fn)
    shape = None
    if len(idims) >= sr + 1:
        spatial = []
        for a in range(sr):
            padded = idims[len(idims) - sr + a] + pb[a] + pa[a]
            eff = (kdims[2 + a] - 1) * dl[a] + 1
            spatial.append(0 if padded < eff or st[a] <= 0 else (padded - eff) // st[a] + 1)
        batch = idims[: len(idims) - sr - 1]
        flat = input_dims is not None and x is not None and len(x.shape) == 1 and len(idims) != 1
        lead = (_prod(batch),) if flat or not batch else batch
        shape = (*lead, kdims[0], *spatial)
    args = (*_carray(idims), _carray(kdims)[0], sr, _carray(st)[0], _carray(pb)[0], _carray(pa)[0],
            _carray(dl)[0], g)
    return _run(fn, "bk_conv", ctx, (x, k, b), names, args, shape, verify=True)


# ---------------------------------------------------------------------------
# 3.5 Row reductions and masks
# ---------------------------------------------------------------------------


def _rows_op(cname, fn, x, rows, cols, ctx, reduce, extra=()):
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    r, c, lead = _matrix(x, rows, cols, fn)
    return _run(fn, cname, ctx, (x,), ("x",), (r, c, *extra), lead if reduce else (*lead, c))


def rows_sum(x: ArrayLike, *, rows: Optional[int] = None, cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Sums over the last axis: x (..., cols) -> (...) (bk_rows_sum; float64
    accumulation). cols == 0 gives zeros. Example:
    ``bufkern.rows_sum([[1.0, 2.0], [3.0, 4.0]])`` is [3, 7]."""
    return _rows_op("bk_rows_sum", "bufkern.rows_sum", x, rows, cols, ctx, True)


def rows_max(x: ArrayLike, *, rows: Optional[int] = None, cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Maxima over the last axis ignoring NaN (-inf for an all-NaN row, 0 for
    cols == 0): x (..., cols) -> (...) (bk_rows_max). Example:
    ``bufkern.rows_max([[1.0, 5.0]])`` is [5]."""
    return _rows_op("bk_rows_max", "bufkern.rows_max", x, rows, cols, ctx, True)


def rows_first_max_mask(x: ArrayLike, *, rows: Optional[int] = None, cols: Optional[int] = None,
                        ctx: Any = None) -> Buffer:
    """One-hot mask of each row's first maximum along the last axis, x's
    shape (bk_rows_first_max_mask). Example:
    ``bufkern.rows_first_max_mask([3.0, 1.0, 3.0])`` is [1, 0, 0]."""
    return _rows_op("bk_rows_first_max_mask", "bufkern.rows_first_max_mask", x, rows, cols, ctx, False)


def rows_topk_mask(x: ArrayLike, k: int, *, rows: Optional[int] = None, cols: Optional[int] = None,
                   ctx: Any = None) -> Buffer:
    """Mask of each row's k largest entries along the last axis (ties to the
    lowest index; NaN ranks highest), x's shape (bk_rows_topk_mask).
    InvalidArgumentError for k < 0. Example:
    ``bufkern.rows_topk_mask([3.0, 1.0, 3.0, 2.0], 2)`` is [1, 0, 1, 0]."""
    fn = "bufkern.rows_topk_mask"
    return _rows_op("bk_rows_topk_mask", fn, x, rows, cols, ctx, False, (_i64(k, "k", fn),))


def rows_masked_softmax(scores: ArrayLike, mask: ArrayLike, *, rows: Optional[int] = None,
                        cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Softmax over the last axis restricted to entries where mask != 0 (a
    row with none allowed gives zeros), scores' shape
    (bk_rows_masked_softmax). mask has scores' shape; an integer or boolean
    mask takes scores' dtype. Example:
    ``bufkern.rows_masked_softmax([[1.0, 2.0]], [[1, 0]])`` is [[1, 0]]."""
    fn = "bufkern.rows_masked_softmax"
    ctx, (s, m) = _take(fn, ctx, (scores, mask), ("scores", "mask"))
    r, c, lead = _matrix(s, rows, cols, fn, "scores")
    _expect(m, (*lead, c), "mask", fn)
    return _run(fn, "bk_rows_masked_softmax", ctx, (s, m), ("scores", "mask"), (r, c), (*lead, c))


# ---------------------------------------------------------------------------
# 3.6 Vectors, broadcasts and layout
# ---------------------------------------------------------------------------


def _length(x, n, name, fn, arg):
    """The element count of x, or n checked against it."""
    if n is None:
        return _prod(x.shape) if x is not None else 0
    n = _i64(n, name, fn)
    if x is not None and n >= 0 and n != _prod(x.shape) and len(x.shape) != 1:
        raise _bad(fn, f"{name} = {n} does not describe {arg} of shape {x.shape}")
    return n


def vec_concat(a: ArrayLike, b: ArrayLike, *, n: Optional[int] = None, m: Optional[int] = None,
               ctx: Any = None) -> Buffer:
    """The elements of a, then those of b, flat: (n + m,) (bk_vec_concat).
    Example: ``bufkern.vec_concat([1.0], [2.0, 3.0])`` is [1, 2, 3]."""
    fn = "bufkern.vec_concat"
    ctx, (a, b) = _take(fn, ctx, (a, b), ("a", "b"))
    n = _length(a, n, "n", fn, "a")
    m = _length(b, m, "m", fn, "b")
    return _run(fn, "bk_vec_concat", ctx, (a, b), ("a", "b"), (n, m), (n + m,) if n >= 0 and m >= 0 else None)


def vec_slice(x: ArrayLike, start: int, length: int, *, n: Optional[int] = None, ctx: Any = None) -> Buffer:
    """A copy of the flat elements x[start : start + length], (length,)
    (bk_vec_slice). InvalidArgumentError when the range leaves x. Example:
    ``bufkern.vec_slice([1.0, 2.0, 3.0], 1, 2)`` is [2, 3]."""
    fn = "bufkern.vec_slice"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    n = _length(x, n, "n", fn, "x")
    start, length = _i64(start, "start", fn), _i64(length, "length", fn)
    return _run(fn, "bk_vec_slice", ctx, (x,), ("x",), (n, start, length), (length,) if length >= 0 else None)


def broadcast_col(vec: ArrayLike, cols: int, *, rows: Optional[int] = None, ctx: Any = None) -> Buffer:
    """(rows, cols) with out[i, j] = vec[i]; rows = len(vec) (bk_broadcast_col).
    Example: ``bufkern.broadcast_col([1.0, 2.0], 3)`` is [[1, 1, 1], [2, 2, 2]]."""
    fn = "bufkern.broadcast_col"
    ctx, (v,) = _take(fn, ctx, (vec,), ("vec",))
    r = _length(v, rows, "rows", fn, "vec")
    c = _i64(cols, "cols", fn)
    return _run(fn, "bk_broadcast_col", ctx, (v,), ("vec",), (r, c), (r, c))


def _axis_map(in_dims, out_dims, axis_map, fn):
    """axis_map (checked to have out_rank entries), or numpy's right-aligned
    broadcasting: input axis a reads into output axis out_rank - in_rank + a."""
    if axis_map is None:
        lag = len(out_dims) - len(in_dims)
        if lag < 0:
            raise _bad(fn, f"cannot broadcast shape {in_dims} to the lower rank {out_dims}")
        return tuple(0 if j < lag else j - lag + 1 for j in range(len(out_dims)))
    amap = _ints(axis_map, "axis_map", fn)
    if len(amap) != len(out_dims):
        raise _bad(fn, f"axis_map has {len(amap)} entries, expected out_rank = {len(out_dims)}")
    return amap


def broadcast_to(x: ArrayLike, shape: Optional[Sequence[int]] = None, axis_map: Optional[Sequence[int]] = None,
                 *, in_dims=None, out_dims=None, ctx: Any = None) -> Buffer:
    """x broadcast to `shape` (bk_broadcast_to). Without axis_map, numpy's
    rule: x's axes align with the trailing axes of `shape`, each of extent 1
    or equal. axis_map (one entry per output axis: 0 inserts the axis, a + 1
    reads input axis a) also permutes. out_dims= is `shape`; in_dims= gives
    the geometry of a flat x. Result: `shape`. Raises InvalidArgumentError.

    Example: ``bufkern.broadcast_to([1.0, 2.0], (3, 2))``.
    """
    fn = "bufkern.broadcast_to"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    if shape is None:
        shape = out_dims
    elif out_dims is not None and tuple(shape) != tuple(out_dims):
        raise TypeError(f"{fn}: shape and out_dims differ")
    if shape is None:
        raise TypeError(f"{fn}: the target shape is required")
    odims = _ints(shape, "shape", fn)
    idims = _geometry(x, in_dims, "in_dims", fn)
    amap = _axis_map(idims, odims, axis_map, fn)
    args = (*_carray(idims), *_carray(odims), _carray(amap)[0])
    return _run(fn, "bk_broadcast_to", ctx, (x,), ("x",), args, odims)


def broadcast_to_adjoint(dout: ArrayLike, in_dims: Sequence[int], axis_map: Optional[Sequence[int]] = None,
                         *, out_dims=None, ctx: Any = None) -> Buffer:
    """The sum-adjoint of broadcast_to: dout (the broadcast shape) summed back
    to `in_dims` (bk_broadcast_to_adjoint; float64 accumulation). axis_map as
    for broadcast_to; out_dims= gives the geometry of a flat dout. Result:
    in_dims. Example: ``bufkern.broadcast_to_adjoint(np.ones((3, 2)), (2,))``
    is [3, 3]."""
    fn = "bufkern.broadcast_to_adjoint"
    ctx, (d,) = _take(fn, ctx, (dout,), ("dout",))
    idims = _ints(in_dims, "in_dims", fn)
    odims = _geometry(d, out_dims, "out_dims", fn, "dout")
    amap = _axis_map(idims, odims, axis_map, fn)
    args = (*_carray(idims), *_carray(odims), _carray(amap)[0])
    return _run(fn, "bk_broadcast_to_adjoint", ctx, (d,), ("dout",), args, idims)


def swap_adjacent(x: ArrayLike, depth: int = -1, *, dims: Optional[Sequence[int]] = None, ctx: Any = None) -> Buffer:
    """x with axes depth and depth + 1 exchanged (bk_swap_adjacent); depth in
    [-(rank - 1), rank - 1), negative counting from the end (-1: the last two
    axes). Result: x's shape with the two extents swapped. dims= gives the
    geometry of a flat x. InvalidArgumentError for a depth outside that
    range. Example: ``bufkern.swap_adjacent(np.zeros((2, 3, 4)), 0).shape``
    is (3, 2, 4)."""
    fn = "bufkern.swap_adjacent"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    shape = _geometry(x, dims, "dims", fn)
    d = _cint(depth, "depth", fn)
    pairs = len(shape) - 1
    if pairs < 1 or not -pairs <= d < pairs:
        raise _bad(fn, f"depth = {d} is outside [{-pairs}, {pairs}) for shape {shape}"
                   if pairs >= 1 else f"depth = {d}: shape {shape} has no two adjacent axes")
    d = d + pairs if d < 0 else d
    out = list(shape)
    out[d], out[d + 1] = out[d + 1], out[d]
    return _run(fn, "bk_swap_adjacent", ctx, (x,), ("x",), (*_carray(shape), d), tuple(out))


def sum_axis(x: ArrayLike, axis: int, *, dims: Optional[Sequence[int]] = None, ctx: Any = None) -> Buffer:
    """Sum over `axis` (negative allowed), the axis removed (bk_sum_axis;
    float64 accumulation, in index order). A 0-d x (axis 0 or -1) gives a
    copy. Example: ``bufkern.sum_axis(np.ones((2, 3)), -1)`` is [3, 3]."""
    fn = "bufkern.sum_axis"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    shape = _geometry(x, dims, "dims", fn)
    a = _axis(axis, len(shape), "axis", fn, shape)
    out = tuple(v for i, v in enumerate(shape) if i != a)
    return _run(fn, "bk_sum_axis", ctx, (x,), ("x",), (*_carray(shape), a), out)


# ---------------------------------------------------------------------------
# 3.7 Layer normalization
# ---------------------------------------------------------------------------


def layernorm_forward(x: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float = 1e-5, *,
                      rows: Optional[int] = None, cols: Optional[int] = None, ctx: Any = None):
    """Layer norm over the last axis (bk_layernorm_forward): returns
    (out, normalized, inv_std) with out = normalized * gamma + beta.

    x: (..., cols); gamma, beta: (cols,). out and normalized have x's shape,
    inv_std = 1/sqrt(var + eps) has x.shape[:-1]. Raises
    InvalidArgumentError (cols == 0, eps < 0 or not finite, shapes),
    DtypeError. Example: ``out, n, s = bufkern.layernorm_forward(x, g, b)``.
    """
    fn = "bufkern.layernorm_forward"
    names = ("x", "gamma", "beta")
    ctx, (x, g, b) = _take(fn, ctx, (x, gamma, beta), names)
    r, c, lead = _matrix(x, rows, cols, fn)
    _expect(g, (c,), "gamma", fn)
    _expect(b, (c,), "beta", fn)
    full = (*lead, c)
    return _run(fn, "bk_layernorm_forward", ctx, (x, g, b), names, (r, c, _float(eps, "eps", fn)),
                (full, full, lead), nout=3)


def layernorm_backward(dout: ArrayLike, normalized: ArrayLike, inv_std: ArrayLike, gamma: ArrayLike, *,
                       rows: Optional[int] = None, cols: Optional[int] = None, ctx: Any = None):
    """The layer-norm VJP from layernorm_forward's saved values
    (bk_layernorm_backward): returns (dx, dgamma, dbeta).

    dout, normalized: (..., cols); inv_std: (...); gamma: (cols,). dx has
    dout's shape, dgamma and dbeta (cols,). Raises InvalidArgumentError,
    DtypeError. Example: ``dx, dg, db = bufkern.layernorm_backward(dy, n, s, g)``.
    """
    fn = "bufkern.layernorm_backward"
    names = ("dout", "normalized", "inv_std", "gamma")
    ctx, bufs = _take(fn, ctx, (dout, normalized, inv_std, gamma), names)
    r, c, lead = _matrix(bufs[0], rows, cols, fn, "dout")
    _expect(bufs[1], (*lead, c), "normalized", fn)
    _expect(bufs[3], (c,), "gamma", fn)
    return _run(fn, "bk_layernorm_backward", ctx, bufs, names, (r, c), ((*lead, c), (c,), (c,)), nout=3)


# ---------------------------------------------------------------------------
# 3.8 Batched matrix products
# ---------------------------------------------------------------------------


def _bmm_geometry(a, b, ta, tb, batch, m, n, p, fn):
    """(batch, m, n, p, result shape) from 2-D or 3-D operands, or the
    keywords checked against them."""
    sa = a.shape if a is not None else None
    sb = b.shape if b is not None else None
    given = [v for v in (batch, m, n, p) if v is not None]
    if sa is not None and sb is not None and len(sa) in (2, 3) and len(sa) == len(sb):
        three = len(sa) == 3
        ab = sa[0] if three else 1
        am, an = (sa[-1], sa[-2]) if ta else (sa[-2], sa[-1])
        bn, bp = (sb[-1], sb[-2]) if tb else (sb[-2], sb[-1])
        if three and sb[0] != ab:
            raise _bad(fn, f"A has batch {ab} but B has batch {sb[0]} (shapes {sa}, {sb})")
        if an != bn:
            raise _bad(fn, f"op(A) is ({am}, {an}) but op(B) is ({bn}, {bp}): inner extents differ "
                           f"(shapes {sa}, {sb}, transpose_a={bool(ta)}, transpose_b={bool(tb)})")
        inferred = (ab, am, an, bp)
        vals = tuple(inferred[i] if v is None else _i64(v, nm, fn)
                     for i, (v, nm) in enumerate(((batch, "batch"), (m, "m"), (n, "n"), (p, "p"))))
        if vals != inferred:
            raise _bad(fn, f"batch, m, n, p = {vals} do not describe A of shape {sa} and B of shape {sb}")
        return (*vals, (ab, am, bp) if three else (am, bp))
    if len(given) != 4:
        raise TypeError(
            f"{fn}: A and B must both be 2-D or both 3-D (got shapes {sa}, {sb}), or give batch, m, n and p"
        )
    vals = tuple(_i64(v, nm, fn) for v, nm in ((batch, "batch"), (m, "m"), (n, "n"), (p, "p")))
    bt, mm, nn, pp = vals
    _expect(a, (bt, nn, mm) if ta else (bt, mm, nn), "A", fn)
    _expect(b, (bt, pp, nn) if tb else (bt, nn, pp), "B", fn)
    return (*vals, (bt, mm, pp))


def _flags(transpose, trans, name, fn):
    if trans is not None:
        if transpose is not False and bool(transpose) != bool(trans):
            raise TypeError(f"{fn}: transpose_{name} and trans_{name} differ")
        transpose = trans
    return _flag(transpose, f"transpose_{name}", fn)


def bmm(A: ArrayLike, B: ArrayLike, transpose_a: bool = False, transpose_b: bool = False, *, trans_a=None,
        trans_b=None, batch: Optional[int] = None, m: Optional[int] = None, n: Optional[int] = None,
        p: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Matrix products C = op(A) op(B) (bk_bmm): A, B both 2-D, (m, n) x
    (n, p) -> (m, p), or both 3-D, (batch, m, n) x (batch, n, p) ->
    (batch, m, p). transpose_a: A is stored (..., n, m); transpose_b: B is
    stored (..., p, n); no transposed copy is made (trans_a=, trans_b= are
    the same flags). batch=, m=, n=, p= give the geometry of flat inputs.
    Raises InvalidArgumentError (extents), DtypeError.

    Example: ``bufkern.bmm(np.ones((2, 3)), np.ones((3, 4))).shape == (2, 4)``.
    """
    fn = "bufkern.bmm"
    ctx, (a, b) = _take(fn, ctx, (A, B), ("A", "B"))
    ta, tb = _flags(transpose_a, trans_a, "a", fn), _flags(transpose_b, trans_b, "b", fn)
    bt, mm, nn, pp, shape = _bmm_geometry(a, b, ta, tb, batch, m, n, p, fn)
    return _run(fn, "bk_bmm", ctx, (a, b), ("A", "B"), (bt, mm, nn, pp, ta, tb), shape)


def bmm_scaled(A: ArrayLike, B: ArrayLike, transpose_a: bool = False, transpose_b: bool = False,
               scale: float = 1.0, *, trans_a=None, trans_b=None, batch: Optional[int] = None,
               m: Optional[int] = None, n: Optional[int] = None, p: Optional[int] = None, ctx: Any = None):
    """C = scale * op(A) op(B) with the range-loss flag (bk_bmm_scaled;
    synchronizes once): returns (C, range_loss), range_loss a bool set when
    an entry is non-finite or below the smallest normal, or the product may
    overflow. Shapes as for bmm; scale finite and > 0.

    Example: ``c, lost = bufkern.bmm_scaled(a, b, transpose_b=True, scale=0.125)``.
    """
    fn = "bufkern.bmm_scaled"
    ctx, (a, b) = _take(fn, ctx, (A, B), ("A", "B"))
    ta, tb = _flags(transpose_a, trans_a, "a", fn), _flags(transpose_b, trans_b, "b", fn)
    bt, mm, nn, pp, shape = _bmm_geometry(a, b, ta, tb, batch, m, n, p, fn)
    args = (bt, mm, nn, pp, ta, tb, _float(scale, "scale", fn))
    return _run(fn, "bk_bmm_scaled", ctx, (a, b), ("A", "B"), args, shape, flag=True)


# ---------------------------------------------------------------------------
# 3.9 Real FFTs
# ---------------------------------------------------------------------------


def rfft(x: ArrayLike, *, batch: Optional[int] = None, n: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Real FFT over the last axis (bk_rfft, unnormalized): x (..., n) ->
    (..., n // 2 + 1, 2) holding [re, im] of each bin. InvalidArgumentError
    for n == 0. Example: ``bufkern.rfft([1.0, 0.0, 0.0, 0.0]).shape == (3, 2)``."""
    fn = "bufkern.rfft"
    ctx, (x,) = _take(fn, ctx, (x,), ("x",))
    r, c, lead = _matrix(x, batch, n, fn, "x", ("batch", "n"))
    return _run(fn, "bk_rfft", ctx, (x,), ("x",), (r, c), (*lead, c // 2 + 1, 2) if c >= 0 else None)


def _spectrum(spec, batch, n, fn):
    """(batch, n, lead) of a packed half spectrum (..., n // 2 + 1, 2)."""
    s = spec.shape if spec is not None else (0,)
    if len(s) >= 2 and s[-1] == 2:
        half = s[-2]
        nn = 2 * (half - 1) if n is None else _i64(n, "n", fn)
        if nn // 2 + 1 != half and nn >= 0:
            raise _bad(fn, f"n = {nn} needs {nn // 2 + 1} bins but spec has shape {s}")
        lead = s[:-2]
        bt = _prod(lead) if batch is None else _i64(batch, "batch", fn)
        if bt != _prod(lead):
            raise _bad(fn, f"batch = {bt} does not describe spec of shape {s}")
        return bt, nn, lead
    if n is None:
        raise TypeError(f"{fn}: spec of shape {s} is not (..., bins, 2): give n= (and batch=)")
    nn = _i64(n, "n", fn)
    bt = _i64(batch, "batch", fn) if batch is not None else (s[0] // (2 * (nn // 2 + 1)) if nn >= 0 else 0)
    return bt, nn, (bt,)


def irfft(spec: ArrayLike, n: Optional[int] = None, *, batch: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Inverse of rfft with the 1/n factor (bk_irfft): spec (..., n // 2 + 1,
    2) -> (..., n); n defaults to 2 * (bins - 1), as numpy's. The imaginary
    parts of bin 0 and (even n) bin n/2 are ignored. Example:
    ``bufkern.irfft(bufkern.rfft(x), n=x.shape[-1])``."""
    fn = "bufkern.irfft"
    ctx, (s,) = _take(fn, ctx, (spec,), ("spec",))
    bt, nn, lead = _spectrum(s, batch, n, fn)
    return _run(fn, "bk_irfft", ctx, (s,), ("spec",), (bt, nn), (*lead, nn) if nn >= 0 else None)


def irfft_unnormalized(spec: ArrayLike, n: Optional[int] = None, *, batch: Optional[int] = None,
                       ctx: Any = None) -> Buffer:
    """irfft without the 1/n factor, the adjoint of rfft up to the packing
    weights (bk_irfft_unnormalized). Shapes as for irfft."""
    fn = "bufkern.irfft_unnormalized"
    ctx, (s,) = _take(fn, ctx, (spec,), ("spec",))
    bt, nn, lead = _spectrum(s, batch, n, fn)
    return _run(fn, "bk_irfft_unnormalized", ctx, (s,), ("spec",), (bt, nn), (*lead, nn) if nn >= 0 else None)


# ---------------------------------------------------------------------------
# 3.10 Diagonal selective scans
# ---------------------------------------------------------------------------

_SCAN = ("A", "B", "X", "h0")
_SCAN_BWD = _SCAN + ("out", "dy")


def _scan(cname, fn, values, names, seq_len, state, ctx, var, nout):
    ctx, bufs = _take(fn, ctx, values, names)
    t, s, _ = _matrix(bufs[2], seq_len, state, fn, "X", ("seq_len", "state"))
    t_s, vec = (t, s), (s,)
    for b, name in zip(bufs, names):
        _expect(b, t_s if name in ("X", "out", "dy") or (var and name in ("A", "B")) else vec, name, fn)
    if nout == 1:
        shapes = t_s
    else:
        shapes = (t_s, t_s, t_s, vec) if var else (vec, vec, t_s, vec)
    return _run(fn, cname, ctx, bufs, names, (t, s), shapes, nout=nout)


def scan_diag(A: ArrayLike, B: ArrayLike, X: ArrayLike, h0: ArrayLike, *, seq_len: Optional[int] = None,
              state: Optional[int] = None, ctx: Any = None) -> Buffer:
    """h[t] = A * h[t-1] + B * X[t], h[-1] = h0 (bk_scan_diag): A, B, h0
    (state,), X (seq_len, state); result (seq_len, state). Example:
    ``bufkern.scan_diag(a, b, x, h0)``."""
    return _scan("bk_scan_diag", "bufkern.scan_diag", (A, B, X, h0), _SCAN, seq_len, state, ctx, False, 1)


def scan_diag_backward(A: ArrayLike, B: ArrayLike, X: ArrayLike, h0: ArrayLike, out: ArrayLike, dy: ArrayLike,
                       *, seq_len: Optional[int] = None, state: Optional[int] = None, ctx: Any = None):
    """Gradients of scan_diag from its result `out` and the output gradient
    dy (seq_len, state): returns (dA, dB, dX, dh0) with dA, dB, dh0
    (state,) and dX (seq_len, state) (bk_scan_diag_backward)."""
    return _scan("bk_scan_diag_backward", "bufkern.scan_diag_backward", (A, B, X, h0, out, dy), _SCAN_BWD,
                 seq_len, state, ctx, False, 4)


def scan_diag_var(A: ArrayLike, B: ArrayLike, X: ArrayLike, h0: ArrayLike, *, seq_len: Optional[int] = None,
                  state: Optional[int] = None, ctx: Any = None) -> Buffer:
    """Token-dependent scan h[t] = A[t] * h[t-1] + B[t] * X[t]
    (bk_scan_diag_var): A, B, X (seq_len, state), h0 (state,); result
    (seq_len, state)."""
    return _scan("bk_scan_diag_var", "bufkern.scan_diag_var", (A, B, X, h0), _SCAN, seq_len, state, ctx, True, 1)


def scan_diag_var_backward(A: ArrayLike, B: ArrayLike, X: ArrayLike, h0: ArrayLike, out: ArrayLike,
                           dy: ArrayLike, *, seq_len: Optional[int] = None, state: Optional[int] = None,
                           ctx: Any = None):
    """Gradients of scan_diag_var: returns (dA, dB, dX, dh0), the first three
    (seq_len, state), dh0 (state,) (bk_scan_diag_var_backward)."""
    return _scan("bk_scan_diag_var_backward", "bufkern.scan_diag_var_backward", (A, B, X, h0, out, dy),
                 _SCAN_BWD, seq_len, state, ctx, True, 4)


# ---------------------------------------------------------------------------
# 3.11 Gather and scatter-add of rows
# ---------------------------------------------------------------------------


def _table(mat, rows, cols, fn):
    """(rows, cols, row shape) of a table whose rows run along its first axis."""
    s = mat.shape if mat is not None else (0,)
    r = None if rows is None else _i64(rows, "rows", fn)
    c = None if cols is None else _i64(cols, "cols", fn)
    if len(s) >= 2 or (len(s) == 1 and r is None and c is None):
        inferred = (s[0], _prod(s[1:])) if len(s) >= 2 else (s[0], 1)
        got = (inferred[0] if r is None else r, inferred[1] if c is None else c)
        if got != inferred:
            raise _bad(fn, f"rows = {got[0]}, cols = {got[1]} do not describe mat of shape {s}")
        return got[0], got[1], tuple(s[1:])
    r, c, _ = _matrix(mat, r, c, fn, "mat")
    return r, c, (c,)


def rows_gather(mat: ArrayLike, indices: Any, *, rows: Optional[int] = None, cols: Optional[int] = None,
                ctx: Any = None) -> Buffer:
    """out[r] = mat[indices[r]], or an exact +0 row where indices[r] >= rows
    (bk_rows_gather). mat: (rows, ...); indices: k host integers (a list, a
    numpy or torch integer array; negative ones are InvalidArgumentError,
    above 2**32 - 1 too). Result: (k, ...). Example:
    ``bufkern.rows_gather(np.eye(3), [2, 0])``."""
    fn = "bufkern.rows_gather"
    ctx, (mt,) = _take(fn, ctx, (mat,), ("mat",))
    r, c, row = _table(mt, rows, cols, fn)
    ptr, k, keep = _indices(indices, "indices", fn)
    return _run(fn, "bk_rows_gather", ctx, (mt,), ("mat",), (r, c, ptr, k), (k, *row))


def rows_scatter_add(mat: ArrayLike, values: ArrayLike, indices: Any, *, rows: Optional[int] = None,
                     cols: Optional[int] = None, ctx: Any = None) -> Buffer:
    """mat plus values[r] added into row indices[r] for each in-range index,
    repeated indices folded in increasing r (bk_rows_scatter_add). mat:
    (rows, ...); values: (k, ...); result: mat's shape. Example:
    ``bufkern.rows_scatter_add(np.zeros((3, 2)), np.ones((2, 2)), [1, 1])``."""
    fn = "bufkern.rows_scatter_add"
    ctx, (mt, v) = _take(fn, ctx, (mat, values), ("mat", "values"))
    r, c, row = _table(mt, rows, cols, fn)
    ptr, k, keep = _indices(indices, "indices", fn)
    _expect(v, (k, *row), "values", fn)
    return _run(fn, "bk_rows_scatter_add", ctx, (mt, v), ("mat", "values"), (r, c, ptr, k),
                (r, *row) if mt is not None and len(mt.shape) >= 2 else (r, c))

"""The primitives, one Python function per C function of include/bufkern.h.

Conventions (the same for every function):

- Buffers: ``bufkern.Buffer`` objects; anything else is converted with
  ``bufkern.as_buffer`` (zero-copy for DLPack producers such as torch tensors,
  a copy for lists).
- Geometry is explicit, as in C (``rows``, ``cols``, ``dims``...); arrays of
  dims are Python sequences; index arrays are sequences of ints or numpy
  integer arrays (uint64 arrays are passed without a copy).
- ``ctx`` (keyword) is a ``bufkern.Context`` or None for the calling thread's
  default context of the inputs' device.
- Each result is a new Buffer whose shape hint is the natural result shape;
  functions with several results return a tuple.
- Failures raise ``bufkern.Error`` subclasses carrying the status and the
  library's message.
"""

from __future__ import annotations

import numbers
from ctypes import POINTER, byref, c_int, c_int64, c_uint64, c_void_p

import numpy as np

from . import _ffi
from ._core import Buffer, _cint, _i64, as_buffer, ctx_handle, wrap_result
from ._ffi import InvalidArgumentError, check

_OUT = c_void_p


def _lib():
    lib = _ffi._lib
    return lib if lib is not None else _ffi.load()


def _in(x, key, ctx, name, fn, keep):
    """The C handle of input x, ordered for work on context `key`."""
    if type(x) is not Buffer:
        if x is None:
            return None
        x = as_buffer(x, ctx, name, fn)
        keep.append(x)
    h = x._h
    if h is None:
        raise ValueError(f"{fn}: {name} is a closed buffer")
    p = x._pending
    if p is not None and p is not key:
        x._order_for(key)
    return h


_DIMS_CACHE = {}


def _dims(seq, name, fn):
    """(ctypes int64 array, count) from a sequence of ints.

    Arrays are cached by value: a model calls the same few geometries over and
    over, and building and checking the array is a good part of a small call's
    cost. The library only reads them (const int64_t *).
    """
    try:
        key = tuple(seq) if type(seq) is not tuple else seq
        hit = _DIMS_CACHE.get(key)
    except TypeError:
        hit, key = None, None
    # (2.0, 3.0) hashes like (2, 3): only exact ints may use the cached array.
    if hit is not None and all(type(v) is int for v in key):
        return hit
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{fn}: {name} must be a sequence of integers, got {type(seq).__name__}")
    vals = [_i64(v, f"{name}[{i}]", fn) for i, v in enumerate(seq)]
    hit = ((c_int64 * max(len(vals), 1))(*vals), len(vals))
    if key is not None and all(type(v) is int for v in key):
        if len(_DIMS_CACHE) >= 512:
            _DIMS_CACHE.clear()
        _DIMS_CACHE[key] = hit
    return hit


def _indices(idx, fn):
    """(pointer, k, owner) for a host index array (uint64)."""
    if isinstance(idx, np.ndarray):
        arr = idx
    else:
        if isinstance(idx, (str, bytes)) or not hasattr(idx, "__len__"):
            raise TypeError(f"{fn}: indices must be a sequence of integers, got {type(idx).__name__}")
        try:
            arr = np.asarray(idx)
        except (OverflowError, ValueError):
            arr = np.asarray(list(idx), dtype=object)
    if arr.ndim != 1:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT, f"{fn}: indices must be one-dimensional, got shape {arr.shape}"
        )
    k = arr.shape[0]
    if k == 0:
        return None, 0, None
    if arr.dtype == np.uint64:
        arr = np.ascontiguousarray(arr)
    elif arr.dtype.kind in "iub":
        if arr.dtype.kind == "i" and (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise InvalidArgumentError(
                _ffi.ERR_INVALID_ARGUMENT, f"{fn}: indices[{i}] = {int(arr[i])} is negative"
            )
        arr = np.ascontiguousarray(arr, dtype=np.uint64)
    elif arr.dtype == object:
        vals = []
        for i, v in enumerate(arr):
            if not isinstance(v, numbers.Integral):
                raise TypeError(f"{fn}: indices[{i}] must be an integer, got {type(v).__name__}")
            v = int(v)
            if v < 0 or v >= 2**64:
                raise InvalidArgumentError(
                    _ffi.ERR_INVALID_ARGUMENT, f"{fn}: indices[{i}] = {v} is outside [0, 2**64)"
                )
            vals.append(v)
        arr = np.array(vals, dtype=np.uint64)
    else:
        raise TypeError(f"{fn}: indices must be integers, got dtype {arr.dtype}")
    return arr.ctypes.data_as(POINTER(c_uint64)), k, arr


def _flag(v, name, fn) -> int:
    if isinstance(v, bool):
        return int(v)
    return _cint(v, name, fn)


def _float(v, name, fn) -> float:
    if not isinstance(v, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


def _sizes(fn, **kw):
    return [_i64(v, k, fn) for k, v in kw.items()]


# ---------------------------------------------------------------------------
# 3.1 Softmax
# ---------------------------------------------------------------------------


def softmax(x, dims, axis, *, ctx=None) -> Buffer:
    """Softmax along `axis` of the contiguous tensor `dims` (bk_softmax)."""
    fn = "bufkern.softmax"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    d, rank = _dims(dims, "dims", fn)
    out = _OUT()
    check(_lib().bk_softmax(ch, xh, d, rank, _cint(axis, "axis", fn), byref(out)))
    return wrap_result(out.value, key, tuple(d[:rank]))


# ---------------------------------------------------------------------------
# 3.2, 3.3 Cross-entropies
# ---------------------------------------------------------------------------


def xent_weighted_mean(logits, weights, rows, cols, *, ctx=None) -> Buffer:
    """Mean weighted logits cross-entropy, a length-1 buffer (bk_xent_weighted_mean)."""
    fn = "bufkern.xent_weighted_mean"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    lh = _in(logits, key, ctx, "logits", fn, keep)
    wh = _in(weights, key, ctx, "weights", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    out = _OUT()
    check(_lib().bk_xent_weighted_mean(ch, lh, wh, r, c, byref(out)))
    return wrap_result(out.value, key, (1,))


def xent_teacher(student, teacher, rows, cols, gradient=False, *, ctx=None) -> Buffer:
    """Fixed-teacher cross-entropy: the loss (length 1) or, with gradient=True,
    the student gradient (rows, cols) (bk_xent_teacher)."""
    fn = "bufkern.xent_teacher"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    sh = _in(student, key, ctx, "student", fn, keep)
    th = _in(teacher, key, ctx, "teacher", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    g = _flag(gradient, "gradient", fn)
    out = _OUT()
    check(_lib().bk_xent_teacher(ch, sh, th, r, c, g, byref(out)))
    return wrap_result(out.value, key, (r, c) if g == 1 else (1,))


# ---------------------------------------------------------------------------
# 3.4 Grouped convolution
# ---------------------------------------------------------------------------


def conv(
    input,
    kernel,
    bias,
    input_dims,
    kernel_dims,
    stride=None,
    pad_before=None,
    pad_after=None,
    dilation=None,
    groups=1,
    *,
    ctx=None,
) -> Buffer:
    """Grouped convolution over a spatial suffix (bk_conv).

    The spatial rank is len(kernel_dims) - 2. stride and dilation default to
    ones, the paddings to zeros; each has one entry per spatial axis. bias may
    be None. The result's shape hint is (N, C_out, out_1..out_r).
    """
    fn = "bufkern.conv"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(input, key, ctx, "input", fn, keep)
    kh = _in(kernel, key, ctx, "kernel", fn, keep)
    bh = _in(bias, key, ctx, "bias", fn, keep)
    idims, in_rank = _dims(input_dims, "input_dims", fn)
    kdims, k_rank = _dims(kernel_dims, "kernel_dims", fn)
    sr = k_rank - 2
    if sr < 1 or sr > 3:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT,
            f"{fn}: kernel_dims has {k_rank} entries, so spatial_rank = {sr} is outside [1, 3]",
        )
    arrays = []
    for name, seq, default in (
        ("stride", stride, 1),
        ("pad_before", pad_before, 0),
        ("pad_after", pad_after, 0),
        ("dilation", dilation, 1),
    ):
        seq = [default] * sr if seq is None else seq
        arr, n = _dims(seq, name, fn)
        if n != sr:
            raise InvalidArgumentError(
                _ffi.ERR_INVALID_ARGUMENT,
                f"{fn}: {name} has {n} entries, expected spatial_rank = {sr}",
            )
        arrays.append(arr)
    g = _i64(groups, "groups", fn)
    out = _OUT()
    check(
        _lib().bk_conv(ch, xh, kh, bh, idims, in_rank, kdims, sr, *arrays, g, byref(out))
    )
    shape = None
    if in_rank >= sr + 1:
        n = 1
        for v in idims[: in_rank - sr - 1]:
            n *= v
        spatial = []
        for a in range(sr):
            size = idims[in_rank - sr + a]
            padded = size + arrays[1][a] + arrays[2][a]
            eff = (kdims[2 + a] - 1) * arrays[3][a] + 1
            spatial.append(0 if padded < eff else (padded - eff) // arrays[0][a] + 1)
        shape = (n, kdims[0], *spatial)
    return wrap_result(out.value, key, shape, verify=True)


# ---------------------------------------------------------------------------
# 3.5 Row reductions and masks
# ---------------------------------------------------------------------------


def _rows_unary(cfn, fn, x, rows, cols, ctx, shape_of):
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    out = _OUT()
    check(cfn(ch, xh, r, c, byref(out)))
    return wrap_result(out.value, key, shape_of(r, c))


def rows_sum(x, rows, cols, *, ctx=None) -> Buffer:
    """Per-row sums of x (rows, cols), length rows (bk_rows_sum)."""
    return _rows_unary(_lib().bk_rows_sum, "bufkern.rows_sum", x, rows, cols, ctx, lambda r, c: (r,))


def rows_max(x, rows, cols, *, ctx=None) -> Buffer:
    """Per-row maxima ignoring NaN, length rows (bk_rows_max)."""
    return _rows_unary(_lib().bk_rows_max, "bufkern.rows_max", x, rows, cols, ctx, lambda r, c: (r,))


def rows_first_max_mask(x, rows, cols, *, ctx=None) -> Buffer:
    """One-hot mask of each row's first maximum (bk_rows_first_max_mask)."""
    return _rows_unary(
        _lib().bk_rows_first_max_mask, "bufkern.rows_first_max_mask", x, rows, cols, ctx,
        lambda r, c: (r, c),
    )


def rows_topk_mask(x, rows, cols, k, *, ctx=None) -> Buffer:
    """Exact top-k mask per row, ties to the lowest index (bk_rows_topk_mask)."""
    fn = "bufkern.rows_topk_mask"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    r, c, kk = _sizes(fn, rows=rows, cols=cols, k=k)
    out = _OUT()
    check(_lib().bk_rows_topk_mask(ch, xh, r, c, kk, byref(out)))
    return wrap_result(out.value, key, (r, c))


def rows_masked_softmax(scores, mask, rows, cols, *, ctx=None) -> Buffer:
    """Hard-masked softmax per row, allowed where mask != 0 (bk_rows_masked_softmax)."""
    fn = "bufkern.rows_masked_softmax"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    sh = _in(scores, key, ctx, "scores", fn, keep)
    mh = _in(mask, key, ctx, "mask", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    out = _OUT()
    check(_lib().bk_rows_masked_softmax(ch, sh, mh, r, c, byref(out)))
    return wrap_result(out.value, key, (r, c))


# ---------------------------------------------------------------------------
# 3.6 Vectors, broadcasts and layout
# ---------------------------------------------------------------------------


def vec_concat(a, b, n, m, *, ctx=None) -> Buffer:
    """a (n) then b (m) (bk_vec_concat)."""
    fn = "bufkern.vec_concat"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    ah = _in(a, key, ctx, "a", fn, keep)
    bh = _in(b, key, ctx, "b", fn, keep)
    nn, mm = _sizes(fn, n=n, m=m)
    out = _OUT()
    check(_lib().bk_vec_concat(ch, ah, bh, nn, mm, byref(out)))
    return wrap_result(out.value, key, None)


def vec_slice(x, n, start, length, *, ctx=None) -> Buffer:
    """Copy of x[start : start+length] of x (n) (bk_vec_slice; C's `len`)."""
    fn = "bufkern.vec_slice"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    nn, s, ln = _sizes(fn, n=n, start=start, length=length)
    out = _OUT()
    check(_lib().bk_vec_slice(ch, xh, nn, s, ln, byref(out)))
    return wrap_result(out.value, key, None)


def broadcast_col(vec, rows, cols, *, ctx=None) -> Buffer:
    """(rows, cols) with out[i, j] = vec[i] (bk_broadcast_col)."""
    fn = "bufkern.broadcast_col"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    vh = _in(vec, key, ctx, "vec", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    out = _OUT()
    check(_lib().bk_broadcast_col(ch, vh, r, c, byref(out)))
    return wrap_result(out.value, key, (r, c))


def _broadcast(cfn, fn, x, in_dims, out_dims, axis_map, ctx, result_dims):
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x" if result_dims == "out" else "dout", fn, keep)
    idims, in_rank = _dims(in_dims, "in_dims", fn)
    odims, out_rank = _dims(out_dims, "out_dims", fn)
    amap, amap_n = _dims(axis_map, "axis_map", fn)
    if amap_n != out_rank:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT,
            f"{fn}: axis_map has {amap_n} entries, expected out_rank = {out_rank}",
        )
    out = _OUT()
    check(cfn(ch, xh, idims, in_rank, odims, out_rank, amap, byref(out)))
    shape = tuple(odims[:out_rank]) if result_dims == "out" else tuple(idims[:in_rank])
    return wrap_result(out.value, key, shape)


def broadcast_to(x, in_dims, out_dims, axis_map, *, ctx=None) -> Buffer:
    """Broadcast x (in_dims) to out_dims through axis_map (bk_broadcast_to):
    axis_map[j] == 0 inserts output axis j, a+1 reads input axis a."""
    return _broadcast(_lib().bk_broadcast_to, "bufkern.broadcast_to", x, in_dims, out_dims,
                      axis_map, ctx, "out")


def broadcast_to_adjoint(dout, in_dims, out_dims, axis_map, *, ctx=None) -> Buffer:
    """The sum-adjoint of broadcast_to with the same geometry (bk_broadcast_to_adjoint)."""
    return _broadcast(_lib().bk_broadcast_to_adjoint, "bufkern.broadcast_to_adjoint", dout,
                      in_dims, out_dims, axis_map, ctx, "in")


def swap_adjacent(x, dims, depth, *, ctx=None) -> Buffer:
    """Transpose axes depth and depth+1 of the tensor dims (bk_swap_adjacent)."""
    fn = "bufkern.swap_adjacent"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    d, rank = _dims(dims, "dims", fn)
    dp = _cint(depth, "depth", fn)
    out = _OUT()
    check(_lib().bk_swap_adjacent(ch, xh, d, rank, dp, byref(out)))
    shape = list(d[:rank])
    if 0 <= dp < rank - 1:
        shape[dp], shape[dp + 1] = shape[dp + 1], shape[dp]
    return wrap_result(out.value, key, tuple(shape))


def sum_axis(x, dims, axis, *, ctx=None) -> Buffer:
    """Sum over `axis` of the tensor dims, the axis removed (bk_sum_axis)."""
    fn = "bufkern.sum_axis"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    d, rank = _dims(dims, "dims", fn)
    ax = _cint(axis, "axis", fn)
    out = _OUT()
    check(_lib().bk_sum_axis(ch, xh, d, rank, ax, byref(out)))
    shape = tuple(v for i, v in enumerate(d[:rank]) if i != ax)
    return wrap_result(out.value, key, shape)


# ---------------------------------------------------------------------------
# 3.7 Layer normalization
# ---------------------------------------------------------------------------


def layernorm_forward(x, gamma, beta, rows, cols, eps=1e-5, *, ctx=None):
    """Layer norm per row: returns (out, normalized, inv_std) (bk_layernorm_forward)."""
    fn = "bufkern.layernorm_forward"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    gh = _in(gamma, key, ctx, "gamma", fn, keep)
    bh = _in(beta, key, ctx, "beta", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    e = _float(eps, "eps", fn)
    out, norm, inv = _OUT(), _OUT(), _OUT()
    check(_lib().bk_layernorm_forward(ch, xh, gh, bh, r, c, e, byref(out), byref(norm), byref(inv)))
    return (
        wrap_result(out.value, key, (r, c)),
        wrap_result(norm.value, key, (r, c)),
        wrap_result(inv.value, key, (r,)),
    )


def layernorm_backward(dout, normalized, inv_std, gamma, rows, cols, *, ctx=None):
    """Layer-norm VJP from saved values: returns (dx, dgamma, dbeta) (bk_layernorm_backward)."""
    fn = "bufkern.layernorm_backward"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    dh = _in(dout, key, ctx, "dout", fn, keep)
    nh = _in(normalized, key, ctx, "normalized", fn, keep)
    ih = _in(inv_std, key, ctx, "inv_std", fn, keep)
    gh = _in(gamma, key, ctx, "gamma", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    dx, dg, db = _OUT(), _OUT(), _OUT()
    check(_lib().bk_layernorm_backward(ch, dh, nh, ih, gh, r, c, byref(dx), byref(dg), byref(db)))
    return (
        wrap_result(dx.value, key, (r, c)),
        wrap_result(dg.value, key, (c,)),
        wrap_result(db.value, key, (c,)),
    )


# ---------------------------------------------------------------------------
# 3.8 Batched matrix products
# ---------------------------------------------------------------------------


def bmm(A, B, batch, m, n, p, trans_a=False, trans_b=False, *, ctx=None) -> Buffer:
    """C = op(A) op(B), (batch, m, n) x (batch, n, p) -> (batch, m, p) (bk_bmm).
    trans_a: A stored (batch, n, m); trans_b: B stored (batch, p, n)."""
    fn = "bufkern.bmm"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    ah = _in(A, key, ctx, "A", fn, keep)
    bh = _in(B, key, ctx, "B", fn, keep)
    bb, mm, nn, pp = _sizes(fn, batch=batch, m=m, n=n, p=p)
    ta, tb = _flag(trans_a, "trans_a", fn), _flag(trans_b, "trans_b", fn)
    out = _OUT()
    check(_lib().bk_bmm(ch, ah, bh, bb, mm, nn, pp, ta, tb, byref(out)))
    return wrap_result(out.value, key, (bb, mm, pp))


def bmm_scaled(A, B, batch, m, n, p, trans_a=False, trans_b=False, scale=1.0, *, ctx=None):
    """C = scale * op(A) op(B) with the range-loss flag: returns (out, range_loss)
    where range_loss is a bool (bk_bmm_scaled; synchronizes once)."""
    fn = "bufkern.bmm_scaled"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    ah = _in(A, key, ctx, "A", fn, keep)
    bh = _in(B, key, ctx, "B", fn, keep)
    bb, mm, nn, pp = _sizes(fn, batch=batch, m=m, n=n, p=p)
    ta, tb = _flag(trans_a, "trans_a", fn), _flag(trans_b, "trans_b", fn)
    s = _float(scale, "scale", fn)
    out = _OUT()
    flag = c_int(0)
    check(_lib().bk_bmm_scaled(ch, ah, bh, bb, mm, nn, pp, ta, tb, s, byref(out), byref(flag)))
    return wrap_result(out.value, key, (bb, mm, pp)), bool(flag.value)


# ---------------------------------------------------------------------------
# 3.9 Real FFTs
# ---------------------------------------------------------------------------


def rfft(x, batch, n, *, ctx=None) -> Buffer:
    """x (batch, n) -> packed half spectrum (batch, n//2+1, 2) of [re, im] (bk_rfft)."""
    fn = "bufkern.rfft"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    xh = _in(x, key, ctx, "x", fn, keep)
    b, nn = _sizes(fn, batch=batch, n=n)
    out = _OUT()
    check(_lib().bk_rfft(ch, xh, b, nn, byref(out)))
    return wrap_result(out.value, key, (b, nn // 2 + 1, 2))


def irfft(spec, batch, n, *, ctx=None) -> Buffer:
    """Inverse of rfft with the 1/n factor: (batch, n//2+1, 2) -> (batch, n) (bk_irfft)."""
    fn = "bufkern.irfft"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    sh = _in(spec, key, ctx, "spec", fn, keep)
    b, nn = _sizes(fn, batch=batch, n=n)
    out = _OUT()
    check(_lib().bk_irfft(ch, sh, b, nn, byref(out)))
    return wrap_result(out.value, key, (b, nn))


def irfft_unnormalized(spec, batch, n, *, ctx=None) -> Buffer:
    """irfft without the 1/n factor (bk_irfft_unnormalized)."""
    fn = "bufkern.irfft_unnormalized"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    sh = _in(spec, key, ctx, "spec", fn, keep)
    b, nn = _sizes(fn, batch=batch, n=n)
    out = _OUT()
    check(_lib().bk_irfft_unnormalized(ch, sh, b, nn, byref(out)))
    return wrap_result(out.value, key, (b, nn))


# ---------------------------------------------------------------------------
# 3.10 Diagonal selective scans
# ---------------------------------------------------------------------------


def _scan_fwd(cfn, fn, A, B, X, h0, seq_len, state, ctx):
    ch, key = ctx_handle(ctx, fn)
    keep = []
    ah = _in(A, key, ctx, "A", fn, keep)
    bh = _in(B, key, ctx, "B", fn, keep)
    xh = _in(X, key, ctx, "X", fn, keep)
    hh = _in(h0, key, ctx, "h0", fn, keep)
    t, s = _sizes(fn, seq_len=seq_len, state=state)
    out = _OUT()
    check(cfn(ch, ah, bh, xh, hh, t, s, byref(out)))
    return wrap_result(out.value, key, (t, s))


def _scan_bwd(cfn, fn, A, B, X, h0, out, dy, seq_len, state, ctx, per_step):
    ch, key = ctx_handle(ctx, fn)
    keep = []
    ah = _in(A, key, ctx, "A", fn, keep)
    bh = _in(B, key, ctx, "B", fn, keep)
    xh = _in(X, key, ctx, "X", fn, keep)
    hh = _in(h0, key, ctx, "h0", fn, keep)
    oh = _in(out, key, ctx, "out", fn, keep)
    dh = _in(dy, key, ctx, "dy", fn, keep)
    t, s = _sizes(fn, seq_len=seq_len, state=state)
    dA, dB, dX, dh0 = _OUT(), _OUT(), _OUT(), _OUT()
    check(cfn(ch, ah, bh, xh, hh, oh, dh, t, s, byref(dA), byref(dB), byref(dX), byref(dh0)))
    coef = (t, s) if per_step else (s,)
    return (
        wrap_result(dA.value, key, coef),
        wrap_result(dB.value, key, coef),
        wrap_result(dX.value, key, (t, s)),
        wrap_result(dh0.value, key, (s,)),
    )


def scan_diag(A, B, X, h0, seq_len, state, *, ctx=None) -> Buffer:
    """h[t] = A*h[t-1] + B*X[t] with A, B, h0 (state), X (seq_len, state) (bk_scan_diag)."""
    return _scan_fwd(_lib().bk_scan_diag, "bufkern.scan_diag", A, B, X, h0, seq_len, state, ctx)


def scan_diag_backward(A, B, X, h0, out, dy, seq_len, state, *, ctx=None):
    """Gradients of scan_diag: returns (dA, dB, dX, dh0) (bk_scan_diag_backward)."""
    return _scan_bwd(_lib().bk_scan_diag_backward, "bufkern.scan_diag_backward", A, B, X, h0,
                     out, dy, seq_len, state, ctx, False)


def scan_diag_var(A, B, X, h0, seq_len, state, *, ctx=None) -> Buffer:
    """Token-dependent scan: A, B, X (seq_len, state), h0 (state) (bk_scan_diag_var)."""
    return _scan_fwd(_lib().bk_scan_diag_var, "bufkern.scan_diag_var", A, B, X, h0, seq_len,
                     state, ctx)


def scan_diag_var_backward(A, B, X, h0, out, dy, seq_len, state, *, ctx=None):
    """Gradients of scan_diag_var: returns (dA, dB, dX, dh0) (bk_scan_diag_var_backward)."""
    return _scan_bwd(_lib().bk_scan_diag_var_backward, "bufkern.scan_diag_var_backward", A, B,
                     X, h0, out, dy, seq_len, state, ctx, True)


# ---------------------------------------------------------------------------
# 3.11 Gather and scatter-add of rows
# ---------------------------------------------------------------------------


def rows_gather(mat, rows, cols, indices, *, ctx=None) -> Buffer:
    """(k, cols) with out[r] = mat[indices[r]], or a +0 row when indices[r] >= rows
    (bk_rows_gather); k = len(indices)."""
    fn = "bufkern.rows_gather"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    mh = _in(mat, key, ctx, "mat", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    ip, k, owner = _indices(indices, fn)
    out = _OUT()
    check(_lib().bk_rows_gather(ch, mh, r, c, ip, k, byref(out)))
    del owner
    return wrap_result(out.value, key, (k, c))


def rows_scatter_add(mat, values, rows, cols, indices, *, ctx=None) -> Buffer:
    """mat plus values[r] added into row indices[r] for in-range indices, folded in
    increasing r (bk_rows_scatter_add); values is (len(indices), cols)."""
    fn = "bufkern.rows_scatter_add"
    ch, key = ctx_handle(ctx, fn)
    keep = []
    mh = _in(mat, key, ctx, "mat", fn, keep)
    vh = _in(values, key, ctx, "values", fn, keep)
    r, c = _sizes(fn, rows=rows, cols=cols)
    ip, k, owner = _indices(indices, fn)
    out = _OUT()
    check(_lib().bk_rows_scatter_add(ch, mh, vh, r, c, ip, k, byref(out)))
    del owner
    return wrap_result(out.value, key, (r, c))

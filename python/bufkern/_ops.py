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
from ctypes import POINTER, c_int, c_int64, c_uint64, c_void_p

import numpy as np

from . import _ffi
from ._core import (
    _I64_MAX, _I64_MIN, _INT_MAX, _INT_MIN, DEFAULT, Buffer, _cint, _i64, as_buffer, ctx_handle, wrap_result,
)
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
    cost. The library only reads them (const int64_t *). Each array also
    carries its values as a tuple of ints, `ints`, so that shape hints need
    not read them back out of the array.
    """
    try:
        key = tuple(seq) if type(seq) is not tuple else seq
        hit = _DIMS_CACHE.get(key)
    except TypeError:
        hit, key = None, None
    # (2.0, 3.0) hashes like (2, 3): only exact ints may use the cached array.
    if hit is not None:
        for v in key:
            if type(v) is not int:
                break
        else:
            return hit
    if isinstance(seq, (str, bytes)) or not hasattr(seq, "__len__"):
        raise TypeError(f"{fn}: {name} must be a sequence of integers, got {type(seq).__name__}")
    vals = [_i64(v, f"{name}[{i}]", fn) for i, v in enumerate(seq)]
    arr = (c_int64 * max(len(vals), 1))(*vals)
    arr.ints = tuple(vals)
    hit = (arr, len(vals))
    if key is not None and all(type(v) is int for v in key):
        if len(_DIMS_CACHE) >= 512:
            _DIMS_CACHE.clear()
        _DIMS_CACHE[key] = hit
    return hit


def _indices(idx, name, fn):
    """(pointer, k) for a host index array (uint64); the pointer holds a
    reference to the array it points into (ndarray.ctypes.data_as does), so
    the array lives as long as the call's arguments."""
    if isinstance(idx, np.ndarray):
        arr = idx
    else:
        if isinstance(idx, (str, bytes)) or not hasattr(idx, "__len__"):
            raise TypeError(f"{fn}: {name} must be a sequence of integers, got {type(idx).__name__}")
        try:
            arr = np.asarray(idx)
        except (OverflowError, ValueError):
            arr = np.asarray(list(idx), dtype=object)
    if arr.ndim != 1:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name} must be one-dimensional, got shape {arr.shape}"
        )
    k = arr.shape[0]
    if k == 0:
        return None, 0
    if arr.dtype == np.uint64:
        arr = np.ascontiguousarray(arr)
    elif arr.dtype.kind in "iub":
        if arr.dtype.kind == "i" and (arr < 0).any():
            i = int(np.flatnonzero(arr < 0)[0])
            raise InvalidArgumentError(
                _ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name}[{i}] = {int(arr[i])} is negative"
            )
        arr = np.ascontiguousarray(arr, dtype=np.uint64)
    elif arr.dtype == object:
        vals = []
        for i, v in enumerate(arr):
            if not isinstance(v, numbers.Integral):
                raise TypeError(f"{fn}: {name}[{i}] must be an integer, got {type(v).__name__}")
            v = int(v)
            if v < 0 or v >= 2**64:
                raise InvalidArgumentError(
                    _ffi.ERR_INVALID_ARGUMENT, f"{fn}: {name}[{i}] = {v} is outside [0, 2**64)"
                )
            vals.append(v)
        arr = np.array(vals, dtype=np.uint64)
    else:
        raise TypeError(f"{fn}: {name} must be integers, got dtype {arr.dtype}")
    return arr.ctypes.data_as(POINTER(c_uint64)), k


def _flag(v, name, fn) -> int:
    if isinstance(v, bool):
        return int(v)
    return _cint(v, name, fn)


def _float(v, name, fn) -> float:
    # A float is its own value, and the Real check (an ABC) costs more than
    # a small call's C work.
    if type(v) is float:
        return v
    if not isinstance(v, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(v).__name__}")
    return float(v)


# The int range each check passes unchanged: a plain int inside it is its own
# C argument, so __call__ takes it without calling the check. _float turns ints
# into floats, and the array checks take sequences, so they have no range.
_PASSTHROUGH = {_i64: (_I64_MIN, _I64_MAX), _cint: (_INT_MIN, _INT_MAX), _flag: (_INT_MIN, _INT_MAX)}


class _Primitive:
    """One primitive: bufkern.<name> over the C function bk_<name>, which
    takes (context, input buffers, further arguments, result pointers).

    `inputs` names the buffer arguments: each is made a buffer and ordered
    for work on the context, in turn. `args` lists the further arguments in
    the C order, each a name (an int64) or a (check, name) pair, where
    check(value, name, fn) returns one C argument or a tuple of them (_dims:
    an array and its count). They are checked in that order, after the
    inputs, and the C function is looked up only then (once: it is kept).

    `shape` maps the checked arguments to the shape hint of the result, or
    with nout > 1 to a tuple of hints, one per result; it runs only once the
    call succeeded, and `verify` checks the hint against the result's
    length. With `flag` the C function also sets an int after the result,
    returned as a bool beside it.

    A small call's cost is mostly the interpreter's, so the plan is worked
    out here once, and __call__ takes the common cases (a Buffer with no
    pending work, an int its check would pass unchanged) inline. The result
    pointers are passed as the c_void_p (and c_int) objects themselves:
    their argtypes are POINTER(c_void_p) and POINTER(c_int), for which ctypes
    passes such an object by reference, as byref would, at less cost.
    """

    __slots__ = ("fn", "cname", "cfn", "inputs", "checks", "first", "shape", "nones", "flag", "verify")

    def __init__(self, name, inputs, args=(), shape=None, nout=1, flag=False, verify=False):
        self.fn = "bufkern." + name
        self.cname = "bk_" + name
        self.cfn = None
        self.inputs = inputs
        checks = []
        for a in args:
            check_arg, arg_name = (_i64, a) if type(a) is str else a
            lo, hi = _PASSTHROUGH.get(check_arg, (1, 0))
            checks.append((check_arg, arg_name, lo, hi))
        self.checks = tuple(checks)
        # Each input is one C argument after the context: the further ones start here.
        self.first = 1 + len(inputs)
        self.shape = shape
        # One None per result, to make the result pointers with map; empty for one result.
        self.nones = (None,) * nout if nout > 1 else ()
        self.flag = flag
        self.verify = verify

    def __call__(self, ctx, *values):
        """The primitive on `values`: the inputs, then the further arguments."""
        fn = self.fn
        if ctx is None:
            ch, key = None, DEFAULT
        else:
            ch, key = ctx_handle(ctx, fn)
        keep = []  # buffers made from other objects, alive until the call returns
        args = [ch]
        append = args.append
        i = 0
        for name in self.inputs:
            v = values[i]
            i += 1
            if type(v) is Buffer and v._pending is None and v._h is not None:
                append(v._h)
            else:
                append(_in(v, key, ctx, name, fn, keep))
        for check_arg, name, lo, hi in self.checks:
            v = values[i]
            i += 1
            if type(v) is int and lo <= v <= hi:
                append(v)
            else:
                a = check_arg(v, name, fn)
                if type(a) is tuple:
                    args += a
                else:
                    append(a)
        cfn = self.cfn
        if cfn is None:
            cfn = self.cfn = getattr(_lib(), self.cname)
        shape = self.shape
        nones = self.nones
        if nones:
            outs = list(map(_OUT, nones))
            status = cfn(*args, *outs)
            if status:
                check(status)
            # A plain loop: a comprehension or map costs more for a few results.
            results = list(shape(*args[self.first :]))
            i = 0
            for o in outs:
                results[i] = wrap_result(o.value, key, results[i])
                i += 1
            return tuple(results)
        out = _OUT()
        if self.flag:
            flag = c_int(0)
            status = cfn(*args, out, flag)
            if status:
                check(status)
            return wrap_result(out.value, key, shape(*args[self.first :])), bool(flag.value)
        status = cfn(*args, out)
        if status:
            check(status)
        if shape is None:
            return wrap_result(out.value, key, None, self.verify)
        return wrap_result(out.value, key, shape(*args[self.first :]), self.verify)


# ---------------------------------------------------------------------------
# 3.1 Softmax
# ---------------------------------------------------------------------------

_SOFTMAX = _Primitive(
    "softmax", ("x",), ((_dims, "dims"), (_cint, "axis")), lambda d, rank, ax: d.ints
)


def softmax(x, dims, axis, *, ctx=None) -> Buffer:
    """Softmax along `axis` of the contiguous tensor `dims` (bk_softmax)."""
    return _SOFTMAX(ctx, x, dims, axis)


# ---------------------------------------------------------------------------
# 3.2, 3.3 Cross-entropies
# ---------------------------------------------------------------------------

_XENT_WEIGHTED_MEAN = _Primitive(
    "xent_weighted_mean", ("logits", "weights"), ("rows", "cols"), lambda r, c: (1,)
)
_XENT_TEACHER = _Primitive(
    "xent_teacher", ("student", "teacher"), ("rows", "cols", (_flag, "gradient")),
    lambda r, c, g: (r, c) if g == 1 else (1,),
)


def xent_weighted_mean(logits, weights, rows, cols, *, ctx=None) -> Buffer:
    """Mean weighted logits cross-entropy, a length-1 buffer (bk_xent_weighted_mean)."""
    return _XENT_WEIGHTED_MEAN(ctx, logits, weights, rows, cols)


def xent_teacher(student, teacher, rows, cols, gradient=False, *, ctx=None) -> Buffer:
    """Fixed-teacher cross-entropy: the loss (length 1) or, with gradient=True,
    the student gradient (rows, cols) (bk_xent_teacher)."""
    return _XENT_TEACHER(ctx, student, teacher, rows, cols, gradient)


# ---------------------------------------------------------------------------
# 3.4 Grouped convolution
# ---------------------------------------------------------------------------


def _conv_geometry(geometry, name, fn):
    """The geometry arguments of bk_conv from (input_dims, kernel_dims,
    stride, pad_before, pad_after, dilation, groups): the two dims arrays
    with their counts, the spatial rank, an array for each per-axis setting
    (defaults filled in) and groups."""
    input_dims, kernel_dims, stride, pad_before, pad_after, dilation, groups = geometry
    idims, in_rank = _dims(input_dims, "input_dims", fn)
    kdims, k_rank = _dims(kernel_dims, "kernel_dims", fn)
    sr = k_rank - 2
    if sr < 1 or sr > 3:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT,
            f"{fn}: kernel_dims has {k_rank} entries, so spatial_rank = {sr} is outside [1, 3]",
        )
    arrays = []
    for setting, seq, default in (
        ("stride", stride, 1),
        ("pad_before", pad_before, 0),
        ("pad_after", pad_after, 0),
        ("dilation", dilation, 1),
    ):
        seq = [default] * sr if seq is None else seq
        arr, n = _dims(seq, setting, fn)
        if n != sr:
            raise InvalidArgumentError(
                _ffi.ERR_INVALID_ARGUMENT,
                f"{fn}: {setting} has {n} entries, expected spatial_rank = {sr}",
            )
        arrays.append(arr)
    return (idims, in_rank, kdims, sr, *arrays, _i64(groups, "groups", fn))


def _conv_shape(idims, in_rank, kdims, sr, stride, pad_before, pad_after, dilation, groups):
    """(N, C_out, out_1..out_r), or None when input_dims is too short."""
    if in_rank < sr + 1:
        return None
    n = 1
    for v in idims[: in_rank - sr - 1]:
        n *= v
    spatial = []
    for a in range(sr):
        size = idims[in_rank - sr + a]
        padded = size + pad_before[a] + pad_after[a]
        eff = (kdims[2 + a] - 1) * dilation[a] + 1
        spatial.append(0 if padded < eff else (padded - eff) // stride[a] + 1)
    return (n, kdims[0], *spatial)


_CONV = _Primitive(
    "conv", ("input", "kernel", "bias"), ((_conv_geometry, "geometry"),), _conv_shape, verify=True
)


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
    geometry = (input_dims, kernel_dims, stride, pad_before, pad_after, dilation, groups)
    return _CONV(ctx, input, kernel, bias, geometry)


# ---------------------------------------------------------------------------
# 3.5 Row reductions and masks
# ---------------------------------------------------------------------------

_ROWS_SUM = _Primitive("rows_sum", ("x",), ("rows", "cols"), lambda r, c: (r,))
_ROWS_MAX = _Primitive("rows_max", ("x",), ("rows", "cols"), lambda r, c: (r,))
_ROWS_FIRST_MAX_MASK = _Primitive("rows_first_max_mask", ("x",), ("rows", "cols"), lambda r, c: (r, c))
_ROWS_TOPK_MASK = _Primitive("rows_topk_mask", ("x",), ("rows", "cols", "k"), lambda r, c, k: (r, c))
_ROWS_MASKED_SOFTMAX = _Primitive(
    "rows_masked_softmax", ("scores", "mask"), ("rows", "cols"), lambda r, c: (r, c)
)


def rows_sum(x, rows, cols, *, ctx=None) -> Buffer:
    """Per-row sums of x (rows, cols), length rows (bk_rows_sum)."""
    return _ROWS_SUM(ctx, x, rows, cols)


def rows_max(x, rows, cols, *, ctx=None) -> Buffer:
    """Per-row maxima ignoring NaN, length rows (bk_rows_max)."""
    return _ROWS_MAX(ctx, x, rows, cols)


def rows_first_max_mask(x, rows, cols, *, ctx=None) -> Buffer:
    """One-hot mask of each row's first maximum (bk_rows_first_max_mask)."""
    return _ROWS_FIRST_MAX_MASK(ctx, x, rows, cols)


def rows_topk_mask(x, rows, cols, k, *, ctx=None) -> Buffer:
    """Exact top-k mask per row, ties to the lowest index (bk_rows_topk_mask)."""
    return _ROWS_TOPK_MASK(ctx, x, rows, cols, k)


def rows_masked_softmax(scores, mask, rows, cols, *, ctx=None) -> Buffer:
    """Hard-masked softmax per row, allowed where mask != 0 (bk_rows_masked_softmax)."""
    return _ROWS_MASKED_SOFTMAX(ctx, scores, mask, rows, cols)


# ---------------------------------------------------------------------------
# 3.6 Vectors, broadcasts and layout
# ---------------------------------------------------------------------------


def _broadcast_geometry(geometry, name, fn):
    """(in_dims, in_rank, out_dims, out_rank, axis_map) from (in_dims,
    out_dims, axis_map); axis_map must have out_rank entries."""
    in_dims, out_dims, axis_map = geometry
    idims, in_rank = _dims(in_dims, "in_dims", fn)
    odims, out_rank = _dims(out_dims, "out_dims", fn)
    amap, amap_n = _dims(axis_map, "axis_map", fn)
    if amap_n != out_rank:
        raise InvalidArgumentError(
            _ffi.ERR_INVALID_ARGUMENT,
            f"{fn}: axis_map has {amap_n} entries, expected out_rank = {out_rank}",
        )
    return idims, in_rank, odims, out_rank, amap


def _swapped_shape(d, rank, depth):
    shape = list(d.ints)
    if 0 <= depth < rank - 1:
        shape[depth], shape[depth + 1] = shape[depth + 1], shape[depth]
    return tuple(shape)


_VEC_CONCAT = _Primitive("vec_concat", ("a", "b"), ("n", "m"))
_VEC_SLICE = _Primitive("vec_slice", ("x",), ("n", "start", "length"))
_BROADCAST_COL = _Primitive("broadcast_col", ("vec",), ("rows", "cols"), lambda r, c: (r, c))
_BROADCAST_TO = _Primitive(
    "broadcast_to", ("x",), ((_broadcast_geometry, "geometry"),),
    lambda idims, in_rank, odims, out_rank, amap: odims.ints,
)
_BROADCAST_TO_ADJOINT = _Primitive(
    "broadcast_to_adjoint", ("dout",), ((_broadcast_geometry, "geometry"),),
    lambda idims, in_rank, odims, out_rank, amap: idims.ints,
)
_SWAP_ADJACENT = _Primitive(
    "swap_adjacent", ("x",), ((_dims, "dims"), (_cint, "depth")), _swapped_shape
)
_SUM_AXIS = _Primitive(
    "sum_axis", ("x",), ((_dims, "dims"), (_cint, "axis")),
    lambda d, rank, ax: tuple(v for i, v in enumerate(d.ints) if i != ax),
)


def vec_concat(a, b, n, m, *, ctx=None) -> Buffer:
    """a (n) then b (m) (bk_vec_concat)."""
    return _VEC_CONCAT(ctx, a, b, n, m)


def vec_slice(x, n, start, length, *, ctx=None) -> Buffer:
    """Copy of x[start : start+length] of x (n) (bk_vec_slice; C's `len`)."""
    return _VEC_SLICE(ctx, x, n, start, length)


def broadcast_col(vec, rows, cols, *, ctx=None) -> Buffer:
    """(rows, cols) with out[i, j] = vec[i] (bk_broadcast_col)."""
    return _BROADCAST_COL(ctx, vec, rows, cols)


def broadcast_to(x, in_dims, out_dims, axis_map, *, ctx=None) -> Buffer:
    """Broadcast x (in_dims) to out_dims through axis_map (bk_broadcast_to):
    axis_map[j] == 0 inserts output axis j, a+1 reads input axis a."""
    return _BROADCAST_TO(ctx, x, (in_dims, out_dims, axis_map))


def broadcast_to_adjoint(dout, in_dims, out_dims, axis_map, *, ctx=None) -> Buffer:
    """The sum-adjoint of broadcast_to with the same geometry (bk_broadcast_to_adjoint)."""
    return _BROADCAST_TO_ADJOINT(ctx, dout, (in_dims, out_dims, axis_map))


def swap_adjacent(x, dims, depth, *, ctx=None) -> Buffer:
    """Transpose axes depth and depth+1 of the tensor dims (bk_swap_adjacent)."""
    return _SWAP_ADJACENT(ctx, x, dims, depth)


def sum_axis(x, dims, axis, *, ctx=None) -> Buffer:
    """Sum over `axis` of the tensor dims, the axis removed (bk_sum_axis)."""
    return _SUM_AXIS(ctx, x, dims, axis)


# ---------------------------------------------------------------------------
# 3.7 Layer normalization
# ---------------------------------------------------------------------------

_LAYERNORM_FORWARD = _Primitive(
    "layernorm_forward", ("x", "gamma", "beta"), ("rows", "cols", (_float, "eps")),
    lambda r, c, e: ((r, c), (r, c), (r,)), nout=3,
)
_LAYERNORM_BACKWARD = _Primitive(
    "layernorm_backward", ("dout", "normalized", "inv_std", "gamma"), ("rows", "cols"),
    lambda r, c: ((r, c), (c,), (c,)), nout=3,
)


def layernorm_forward(x, gamma, beta, rows, cols, eps=1e-5, *, ctx=None):
    """Layer norm per row: returns (out, normalized, inv_std) (bk_layernorm_forward)."""
    return _LAYERNORM_FORWARD(ctx, x, gamma, beta, rows, cols, eps)


def layernorm_backward(dout, normalized, inv_std, gamma, rows, cols, *, ctx=None):
    """Layer-norm VJP from saved values: returns (dx, dgamma, dbeta) (bk_layernorm_backward)."""
    return _LAYERNORM_BACKWARD(ctx, dout, normalized, inv_std, gamma, rows, cols)


# ---------------------------------------------------------------------------
# 3.8 Batched matrix products
# ---------------------------------------------------------------------------

_BMM_ARGS = ("batch", "m", "n", "p", (_flag, "trans_a"), (_flag, "trans_b"))
_BMM = _Primitive("bmm", ("A", "B"), _BMM_ARGS, lambda b, m, n, p, ta, tb: (b, m, p))
_BMM_SCALED = _Primitive(
    "bmm_scaled", ("A", "B"), _BMM_ARGS + ((_float, "scale"),),
    lambda b, m, n, p, ta, tb, s: (b, m, p), flag=True,
)


def bmm(A, B, batch, m, n, p, trans_a=False, trans_b=False, *, ctx=None) -> Buffer:
    """C = op(A) op(B), (batch, m, n) x (batch, n, p) -> (batch, m, p) (bk_bmm).
    trans_a: A stored (batch, n, m); trans_b: B stored (batch, p, n)."""
    return _BMM(ctx, A, B, batch, m, n, p, trans_a, trans_b)


def bmm_scaled(A, B, batch, m, n, p, trans_a=False, trans_b=False, scale=1.0, *, ctx=None):
    """C = scale * op(A) op(B) with the range-loss flag: returns (out, range_loss)
    where range_loss is a bool (bk_bmm_scaled; synchronizes once)."""
    return _BMM_SCALED(ctx, A, B, batch, m, n, p, trans_a, trans_b, scale)


# ---------------------------------------------------------------------------
# 3.9 Real FFTs
# ---------------------------------------------------------------------------

_RFFT = _Primitive("rfft", ("x",), ("batch", "n"), lambda b, n: (b, n // 2 + 1, 2))
_IRFFT = _Primitive("irfft", ("spec",), ("batch", "n"), lambda b, n: (b, n))
_IRFFT_UNNORMALIZED = _Primitive("irfft_unnormalized", ("spec",), ("batch", "n"), lambda b, n: (b, n))


def rfft(x, batch, n, *, ctx=None) -> Buffer:
    """x (batch, n) -> packed half spectrum (batch, n//2+1, 2) of [re, im] (bk_rfft)."""
    return _RFFT(ctx, x, batch, n)


def irfft(spec, batch, n, *, ctx=None) -> Buffer:
    """Inverse of rfft with the 1/n factor: (batch, n//2+1, 2) -> (batch, n) (bk_irfft)."""
    return _IRFFT(ctx, spec, batch, n)


def irfft_unnormalized(spec, batch, n, *, ctx=None) -> Buffer:
    """irfft without the 1/n factor (bk_irfft_unnormalized)."""
    return _IRFFT_UNNORMALIZED(ctx, spec, batch, n)


# ---------------------------------------------------------------------------
# 3.10 Diagonal selective scans
# ---------------------------------------------------------------------------

_SCAN = ("A", "B", "X", "h0")
_SCAN_BWD = _SCAN + ("out", "dy")
_SCAN_SIZES = ("seq_len", "state")
_SCAN_DIAG = _Primitive("scan_diag", _SCAN, _SCAN_SIZES, lambda t, s: (t, s))
_SCAN_DIAG_VAR = _Primitive("scan_diag_var", _SCAN, _SCAN_SIZES, lambda t, s: (t, s))
# The shared coefficients' gradients have one row; the token-dependent ones, seq_len.
_SCAN_DIAG_BACKWARD = _Primitive(
    "scan_diag_backward", _SCAN_BWD, _SCAN_SIZES, lambda t, s: ((s,), (s,), (t, s), (s,)), nout=4
)
_SCAN_DIAG_VAR_BACKWARD = _Primitive(
    "scan_diag_var_backward", _SCAN_BWD, _SCAN_SIZES,
    lambda t, s: ((t, s), (t, s), (t, s), (s,)), nout=4,
)


def scan_diag(A, B, X, h0, seq_len, state, *, ctx=None) -> Buffer:
    """h[t] = A*h[t-1] + B*X[t] with A, B, h0 (state), X (seq_len, state) (bk_scan_diag)."""
    return _SCAN_DIAG(ctx, A, B, X, h0, seq_len, state)


def scan_diag_backward(A, B, X, h0, out, dy, seq_len, state, *, ctx=None):
    """Gradients of scan_diag: returns (dA, dB, dX, dh0) (bk_scan_diag_backward)."""
    return _SCAN_DIAG_BACKWARD(ctx, A, B, X, h0, out, dy, seq_len, state)


def scan_diag_var(A, B, X, h0, seq_len, state, *, ctx=None) -> Buffer:
    """Token-dependent scan: A, B, X (seq_len, state), h0 (state) (bk_scan_diag_var)."""
    return _SCAN_DIAG_VAR(ctx, A, B, X, h0, seq_len, state)


def scan_diag_var_backward(A, B, X, h0, out, dy, seq_len, state, *, ctx=None):
    """Gradients of scan_diag_var: returns (dA, dB, dX, dh0) (bk_scan_diag_var_backward)."""
    return _SCAN_DIAG_VAR_BACKWARD(ctx, A, B, X, h0, out, dy, seq_len, state)


# ---------------------------------------------------------------------------
# 3.11 Gather and scatter-add of rows
# ---------------------------------------------------------------------------

_ROWS_GATHER = _Primitive(
    "rows_gather", ("mat",), ("rows", "cols", (_indices, "indices")), lambda r, c, ip, k: (k, c)
)
_ROWS_SCATTER_ADD = _Primitive(
    "rows_scatter_add", ("mat", "values"), ("rows", "cols", (_indices, "indices")),
    lambda r, c, ip, k: (r, c),
)


def rows_gather(mat, rows, cols, indices, *, ctx=None) -> Buffer:
    """(k, cols) with out[r] = mat[indices[r]], or a +0 row when indices[r] >= rows
    (bk_rows_gather); k = len(indices)."""
    return _ROWS_GATHER(ctx, mat, rows, cols, indices)


def rows_scatter_add(mat, values, rows, cols, indices, *, ctx=None) -> Buffer:
    """mat plus values[r] added into row indices[r] for in-range indices, folded in
    increasing r (bk_rows_scatter_add); values is (len(indices), cols)."""
    return _ROWS_SCATTER_ADD(ctx, mat, values, rows, cols, indices)

"""PyTorch autograd through bufkern: ``torch.autograd.Function`` s over the primitives.

Importing this module imports torch; ``import bufkern`` alone never does, so the
rest of the package works without torch installed.

    import torch, bufkern.torch as bkt
    x = torch.randn(4, 10, dtype=torch.float64, requires_grad=True)
    y = bkt.softmax(x, dim=-1)          # bk_softmax forward
    y[:, 0].sum().backward()            # VJP from the saved output

Every function below takes and returns torch tensors of dtype float32 or
float64 (one dtype per call, as in the library; other dtypes raise
``bufkern.DtypeError``) on the CPU or a CUDA device (all tensors of a call on
one device). Results carry their natural shapes. Each function is backed by a
``torch.autograd.Function`` subclass of the same name in CamelCase
(``Softmax``, ``LayerNorm``, ...), which may also be used directly through
``.apply``.

Data exchange. Tensors are handed to the library through DLPack without a copy
(a tensor that is not contiguous is made contiguous first, as the library reads
compact row-major memory only); results come back as tensors over the
library's memory, also without a copy. Each result is a fresh library buffer
that nothing else references once it is wrapped, so the tensor is its only
holder and in-place writes by torch (gradient accumulation, for one) cannot be
seen through any other buffer: no defensive clone is needed. As with any
DLPack producer, torch does not know the memory's stream: a result used on
another stream than the one it was made on must be synchronized before its
last reference is dropped.

Streams. On a CUDA device each call runs on torch's current stream of that
device: ``context_for`` keeps, per thread, one ``bufkern.Context`` per (device,
stream) bound with ``Context.set_stream``, so the library's work is ordered
after torch's pending work and torch's later work after it, with neither a copy
nor a host synchronization (``bmm_scaled`` excepted: it synchronizes once to
read its range flag, as the library documents). The streams must stay alive as
long as tensors made on them are in use, as for any torch stream.

Backward passes. Each backward is built from the library's own adjoint
primitives where the library has them (``bk_layernorm_backward``,
``bk_scan_diag_backward``, ``bk_broadcast_to_adjoint``, ``bk_rows_scatter_add``
...) and otherwise composed from library calls through the adjoint relations;
where a step is elementwise arithmetic, which the library does not offer, it is
done with torch operations, and each docstring says which. Backward passes are
differentiable once (``once_differentiable``): asking for a second derivative
raises instead of returning a wrong one.
"""

from __future__ import annotations

import functools
import math
import threading
from ctypes import byref, c_void_p
from typing import Optional, Sequence, Tuple

import numpy as np
import torch
from torch.autograd.function import once_differentiable

import bufkern
from bufkern import _ffi

__all__ = [
    "context_for",
    "softmax",
    "masked_softmax",
    "layer_norm",
    "xent_weighted_mean",
    "xent_teacher",
    "bmm",
    "bmm_scaled",
    "scan_diag",
    "scan_diag_var",
    "broadcast_to",
    "broadcast_to_adjoint",
    "swap_adjacent",
    "sum_axis",
    "rows_gather",
    "rows_scatter_add",
    "rfft",
    "irfft",
    "irfft_unnormalized",
    "conv",
    "Softmax",
    "MaskedSoftmax",
    "LayerNorm",
    "XentWeightedMean",
    "XentTeacher",
    "Bmm",
    "BmmScaled",
    "ScanDiag",
    "ScanDiagVar",
    "BroadcastTo",
    "BroadcastToAdjoint",
    "SwapAdjacent",
    "SumAxis",
    "RowsGather",
    "RowsScatterAdd",
    "Rfft",
    "Irfft",
    "Conv",
]

# ---------------------------------------------------------------------------
# Contexts, conversions
# ---------------------------------------------------------------------------

_tls = threading.local()


def context_for(device) -> Optional[bufkern.Context]:
    """The bufkern context for work on `device` (a ``torch.device`` or a string).

    None for the CPU (the calling thread's default context). For a CUDA device,
    a context bound to torch's current stream of that device, made on first use
    and kept per thread (a context serves one thread at a time; autograd runs
    backward passes of CUDA tensors on its own threads) and per stream.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        raise ValueError(f"bufkern.torch: device {device} is neither the CPU nor a CUDA device")
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = torch.cuda.current_stream(index).cuda_stream
    contexts = getattr(_tls, "contexts", None)
    if contexts is None:
        contexts = _tls.contexts = {}
    ctx = contexts.get((index, stream))
    if ctx is None:
        ctx = bufkern.Context(f"cuda:{index}")
        # PyTorch reports the legacy default stream as 0; set_stream maps it
        # to cudaStreamLegacy, the handle torch.from_dlpack passes for it.
        ctx.set_stream(stream)
        contexts[(index, stream)] = ctx
    return ctx


def _arg(t: torch.Tensor) -> torch.Tensor:
    """t as the library can import it: detached (DLPack refuses tensors that
    require grad) and contiguous (the library reads row-major memory)."""
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _tensor(buf, shape) -> torch.Tensor:
    """A fresh library result as a torch tensor of `shape` over the same memory.

    The export goes through bk_buffer_to_dlpack itself, not Buffer.__dlpack__,
    which hands consumers that cannot mark memory read-only (torch 1.x) a copy
    to protect the buffer's other holders. A result made here has none: the
    library keeps no reference to its results and the Buffer object is
    dropped when this module's call returns, so the tensor becomes the
    memory's only holder and torch may write into it (gradient accumulation
    does) without anyone seeing a buffer change. The result was produced on
    torch's current stream (see context_for), so torch may use it at once.
    """
    managed = c_void_p()
    _ffi.check(_ffi.load().bk_buffer_to_dlpack(buf._h, byref(managed)))
    try:
        capsule = _ffi.new_capsule(managed.value)
    except BaseException:
        _ffi.DLManagedTensor.from_address(managed.value).deleter(managed.value)
        raise
    return torch.utils.dlpack.from_dlpack(capsule).reshape(shape)


def _prod(dims) -> int:
    return math.prod(int(d) for d in dims)


def _axis(axis: int, rank: int, name: str, fn: str) -> int:
    """A numpy-style axis (negative counts from the end) in [0, rank)."""
    if not -rank <= axis < rank:
        raise ValueError(f"bufkern.torch.{fn}: {name} = {axis} is outside [{-rank}, {rank})")
    return axis % rank


def _rows_cols(x: torch.Tensor, fn: str) -> Tuple[int, int]:
    """(rows, cols): the last axis of x against all the others."""
    if x.dim() < 1:
        raise ValueError(f"bufkern.torch.{fn}: the input must have at least one axis, got a 0-d tensor")
    cols = int(x.shape[-1])
    return _prod(x.shape[:-1]), cols


def _row_pair(a: torch.Tensor, b: torch.Tensor, names: str, fn: str, convert: bool = False):
    """(rows, cols, a, b) for two inputs of one shape read as (rows, cols)
    matrices over their last axis; a and b come back as such matrices, ready
    for the library, b converted to a's dtype when `convert` (else a dtype
    mismatch is the library's DtypeError)."""
    rows, cols = _rows_cols(a, fn)
    if a.shape != b.shape:
        raise ValueError(
            f"bufkern.torch.{fn}: {names} must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if convert:
        b = b.to(dtype=a.dtype)
    return rows, cols, _arg(a).reshape(rows, cols), _arg(b).reshape(rows, cols)


def _host_indices(indices) -> np.ndarray:
    """Row indices as a host integer array of their own (the library reads
    indices from host memory, so a CUDA index tensor is copied to the host).
    It is a copy in every case: the backward pass reads it again later, after
    the caller may have changed the array or tensor the indices came from."""
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().numpy()
    indices = np.array(indices)
    # An empty list reads as float64; no indices are integers too.
    return indices.astype(np.int64) if indices.size == 0 else indices


# ---------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------


class Softmax(torch.autograd.Function):
    """Softmax along one axis (bk_softmax); see ``softmax``."""

    @staticmethod
    def forward(ctx, x, dim):
        axis = _axis(dim, x.dim(), "dim", "softmax")
        x = _arg(x)
        y = _tensor(bufkern.softmax(x, dims=tuple(x.shape), axis=axis, ctx=context_for(x.device)), x.shape)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        # y * (g - sum(g * y)) along the axis, from the saved output, in torch
        # elementwise operations (the library has no elementwise arithmetic).
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(ctx.axis, keepdim=True)), None


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of x along `dim`: y = exp(x - m) / sum(exp(x - m)) per fibre.

    x: any shape with at least one axis, float32 or float64. dim: an axis,
    negative counting from the end. Returns y, shaped as x.

    Forward: bk_softmax. Backward: dx = y * (g - sum(g * y, dim)) from the saved
    output, in torch elementwise operations.
    """
    return Softmax.apply(x, dim)


class MaskedSoftmax(Softmax):
    """Hard-masked softmax over the last axis (bk_rows_masked_softmax); see
    ``masked_softmax``. The backward pass is the softmax's, along the last axis."""

    @staticmethod
    def forward(ctx, scores, mask):
        shape = scores.shape
        rows, cols, scores, mask = _row_pair(scores, mask, "scores and mask", "masked_softmax", convert=True)
        buf = bufkern.rows_masked_softmax(scores, mask, rows=rows, cols=cols, ctx=context_for(scores.device))
        y = _tensor(buf, shape)
        ctx.axis = -1
        ctx.save_for_backward(y)
        return y


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis of `scores` restricted to the entries where
    ``mask != 0``; blocked entries are exactly +0, a row with no allowed entry is
    all zeros, and blocked scores never influence the result.

    scores: (..., cols), float32 or float64. mask: the same shape, any dtype
    (bool included), converted to the scores' dtype (a copy when it differs);
    it receives no gradient. Returns y, shaped as scores.

    Forward: bk_rows_masked_softmax on (rows, cols) = (prod of the leading axes,
    cols). Backward: dscores = y * (g - sum(g * y)) per row, in torch elementwise
    operations; blocked entries have y = 0, so their gradient is 0.
    """
    return MaskedSoftmax.apply(scores, mask)


# ---------------------------------------------------------------------------
# Layer normalization
# ---------------------------------------------------------------------------


class LayerNorm(torch.autograd.Function):
    """Layer norm over the last axis (bk_layernorm_forward / bk_layernorm_backward); see ``layer_norm``."""

    @staticmethod
    def forward(ctx, x, gamma, beta, eps):
        rows, cols = _rows_cols(x, "layer_norm")
        shape = x.shape
        x, gamma, beta = _arg(x).reshape(rows, cols), _arg(gamma), _arg(beta)
        bctx = context_for(x.device)
        out, normalized, inv_std = bufkern.layernorm_forward(
            x, gamma, beta, rows=rows, cols=cols, eps=eps, ctx=bctx
        )
        ctx.geometry = (rows, cols, shape, gamma.shape, beta.shape)
        # The saved statistics are intermediates, not inputs or outputs, so they
        # live on ctx rather than in save_for_backward.
        ctx.normalized = _tensor(normalized, (rows, cols))
        ctx.inv_std = _tensor(inv_std, (rows,))
        ctx.save_for_backward(gamma)
        return _tensor(out, shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (gamma,) = ctx.saved_tensors
        rows, cols, x_shape, gamma_shape, beta_shape = ctx.geometry
        dx, dgamma, dbeta = bufkern.layernorm_backward(
            _arg(g).reshape(rows, cols), ctx.normalized, ctx.inv_std, gamma, rows=rows, cols=cols,
            ctx=context_for(g.device),
        )
        return _tensor(dx, x_shape), _tensor(dgamma, gamma_shape), _tensor(dbeta, beta_shape), None


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalization over the last axis: per row, normalized = (x - mean) /
    sqrt(var + eps) (population variance), out = normalized * gamma + beta.

    x: (..., cols); gamma, beta: (cols,); one dtype, float32 or float64. eps:
    finite, >= 0. Returns out, shaped as x.

    Forward: bk_layernorm_forward (keeping its normalized values and inverse
    standard deviations). Backward: bk_layernorm_backward on them gives dx,
    dgamma and dbeta in one call.
    """
    return LayerNorm.apply(x, gamma, beta, eps)


# ---------------------------------------------------------------------------
# Cross-entropies
# ---------------------------------------------------------------------------


def _row_loss(ctx, primitive, a, b, names, fn, **flags):
    """The forward pass of a loss over two (rows, cols) operands: the loss as a
    0-d tensor, with the operands saved and (rows, cols, shape) on ctx."""
    shape = a.shape
    rows, cols, a, b = _row_pair(a, b, names, fn)
    ctx.geometry = (rows, cols, shape)
    buf = primitive(a, b, rows=rows, cols=cols, **flags, ctx=context_for(a.device))
    ctx.save_for_backward(a, b)
    return _tensor(buf, ())


class XentWeightedMean(torch.autograd.Function):
    """Mean weighted logits cross-entropy (bk_xent_weighted_mean); see ``xent_weighted_mean``."""

    @staticmethod
    def forward(ctx, logits, weights):
        return _row_loss(ctx, bufkern.xent_weighted_mean, logits, weights, "logits and weights", "xent_weighted_mean")

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        logits, weights = ctx.saved_tensors
        rows, cols, shape = ctx.geometry
        bctx = context_for(logits.device)
        scale = g / max(rows, 1)
        dlogits = dweights = None
        if ctx.needs_input_grad[0]:
            p = _tensor(bufkern.softmax(logits, dims=(rows, cols), axis=1, ctx=bctx), (rows, cols))
            wsum = _tensor(bufkern.rows_sum(weights, rows=rows, cols=cols, ctx=bctx), (rows, 1))
            dlogits = (scale * (p * wsum - weights)).reshape(shape)
        if ctx.needs_input_grad[1]:
            dweights = (scale * (torch.logsumexp(logits, 1, keepdim=True) - logits)).reshape(shape)
        return dlogits, dweights


def xent_weighted_mean(logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean weighted cross-entropy L = (1/rows) * sum_r sum_c w[r,c] * (lse_r - x[r,c])
    with lse_r = log sum_c exp(x[r,c]); a zero weight contributes exactly 0.

    logits, weights: (..., cols), one shape and dtype (float32 or float64); rows
    is the product of the leading axes. Returns L as a 0-d tensor. With one-hot
    weights this is the usual mean cross-entropy over labels.

    Forward: bk_xent_weighted_mean. Backward: dlogits = g/rows * (softmax(x) *
    sum_c w - w) with the softmax from bk_softmax and the weight sums from
    bk_rows_sum; dweights = g/rows * (lse - x) with torch.logsumexp. The products
    and differences are torch elementwise operations.
    """
    return XentWeightedMean.apply(logits, weights)


class XentTeacher(torch.autograd.Function):
    """Fixed-teacher cross-entropy (bk_xent_teacher); see ``xent_teacher``."""

    @staticmethod
    def forward(ctx, student, teacher):
        return _row_loss(
            ctx, bufkern.xent_teacher, student, teacher, "student and teacher", "xent_teacher", gradient=False
        )

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        student, teacher = ctx.saved_tensors
        rows, cols, shape = ctx.geometry
        bctx = context_for(student.device)
        dstudent = dteacher = None
        if ctx.needs_input_grad[0]:
            grad = bufkern.xent_teacher(student, teacher, rows=rows, cols=cols, gradient=True, ctx=bctx)
            dstudent = g * _tensor(grad, shape)
        if ctx.needs_input_grad[1]:
            p = _tensor(bufkern.softmax(teacher, dims=(rows, cols), axis=1, ctx=bctx), (rows, cols))
            term = p * (student - (p * student).sum(1, keepdim=True))
            # A zero teacher probability drops out of the loss even against a
            # -inf student logit, so it drops out of the gradient too.
            term = torch.where(p == 0, torch.zeros_like(term), term)
            dteacher = (-(g / max(rows, 1)) * term).reshape(shape)
        return dstudent, dteacher


def xent_teacher(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the student logits against the teacher's softmax:
    L = (1/rows) * sum_r [ lse(S_r) - sum_c p[r,c] * S[r,c] ], p = softmax(teacher_r).

    student, teacher: (..., cols), one shape and dtype (float32 or float64);
    rows is the product of the leading axes. Returns L as a 0-d tensor.

    Forward: bk_xent_teacher (loss). Backward: the student gradient is the
    library's own, bk_xent_teacher with gradient=1, (softmax(S) - p) / rows,
    scaled by g in torch. The teacher gradient, -(g/rows) * p * (S - sum_c p S),
    takes p from bk_softmax and the rest from torch elementwise operations.
    """
    return XentTeacher.apply(student, teacher)


# ---------------------------------------------------------------------------
# Batched matrix products
# ---------------------------------------------------------------------------


def _bmm_geometry(a, b, trans_a, trans_b, fn):
    """(batch, m, n, p, squeeze) for stored operands a, b; squeeze: 2-D inputs."""
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise ValueError(
            f"bufkern.torch.{fn}: a and b must both be 2-D or both 3-D, "
            f"got shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    squeeze = a.dim() == 2
    batch = 1 if squeeze else int(a.shape[0])
    m, n = (int(a.shape[-1]), int(a.shape[-2])) if trans_a else (int(a.shape[-2]), int(a.shape[-1]))
    nb, p = (int(b.shape[-1]), int(b.shape[-2])) if trans_b else (int(b.shape[-2]), int(b.shape[-1]))
    if nb != n or (not squeeze and int(b.shape[0]) != batch):
        raise ValueError(
            f"bufkern.torch.{fn}: op(a) is {(batch, m, n)} and op(b) is "
            f"{(1 if squeeze else int(b.shape[0]), nb, p)}: "
            "the batches and inner extents must agree"
        )
    return batch, m, n, p, squeeze


def _bmm_operands(ctx, a, b, trans_a, trans_b, fn):
    """(a, b) as 3-D contiguous operands and (batch, m, n, p, squeeze), the
    geometry and the input shapes kept on ctx for the backward pass."""
    batch, m, n, p, squeeze = _bmm_geometry(a, b, trans_a, trans_b, fn)
    ctx.geometry = (batch, m, n, p, bool(trans_a), bool(trans_b))
    ctx.shapes = (a.shape, b.shape)
    a3 = _arg(a).reshape(batch, *a.shape[-2:])
    b3 = _arg(b).reshape(batch, *b.shape[-2:])
    return a3, b3, (m, p) if squeeze else (batch, m, p)


def _bmm_vjp(ctx, product, g):
    """(da, db) of C = op(a) op(b) from the cotangent g, each a product of the
    same kind: `product(A, B, m, n, p, trans_a, trans_b)` of 3-D operands.

    da: op(a) = a gives g op(b)^T; op(a) = a^T (a stored (n, m)) gives op(b) g^T.
    db: op(b) = b gives op(a)^T g; op(b) = b^T (b stored (p, n)) gives g^T op(a).
    """
    a, b = ctx.saved_tensors
    batch, m, n, p, trans_a, trans_b = ctx.geometry
    g = _arg(g).reshape(batch, m, p)
    needs = ctx.needs_input_grad
    da = db = None
    if needs[0]:
        if trans_a:
            da = product(b, g, n, p, m, trans_b, True)
        else:
            da = product(g, b, m, p, n, False, not trans_b)
        da = da.reshape(ctx.shapes[0])
    if needs[1]:
        if trans_b:
            db = product(g, a, p, m, n, True, trans_a)
        else:
            db = product(a, g, n, m, p, not trans_a, False)
        db = db.reshape(ctx.shapes[1])
    return da, db


class Bmm(torch.autograd.Function):
    """Batched product op(a) op(b) (bk_bmm); see ``bmm``."""

    @staticmethod
    def forward(ctx, a, b, trans_a, trans_b):
        a, b, shape = _bmm_operands(ctx, a, b, trans_a, trans_b, "bmm")
        batch, m, n, p, trans_a, trans_b = ctx.geometry
        buf = bufkern.bmm(
            a, b, batch=batch, m=m, n=n, p=p, trans_a=trans_a, trans_b=trans_b, ctx=context_for(a.device)
        )
        ctx.save_for_backward(a, b)
        return _tensor(buf, shape)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        batch = ctx.geometry[0]
        bctx = context_for(g.device)

        def product(x, y, m, n, p, ta, tb):
            buf = bufkern.bmm(x, y, batch=batch, m=m, n=n, p=p, trans_a=ta, trans_b=tb, ctx=bctx)
            return _tensor(buf, (batch, m, p))

        return (*_bmm_vjp(ctx, product, g), None, None)


def bmm(a: torch.Tensor, b: torch.Tensor, trans_a: bool = False, trans_b: bool = False) -> torch.Tensor:
    """Batched matrix product C = op(a) op(b).

    a: (batch, m, n), or (batch, n, m) with trans_a; b: (batch, n, p), or
    (batch, p, n) with trans_b; or both 2-D, a single product. One dtype,
    float32 or float64. Returns C (batch, m, p), or (m, p) for 2-D inputs.

    Forward: bk_bmm. Backward: two more bk_bmm calls through the transpose
    flags (da = g op(b)^T, db = op(a)^T g, stored as a and b are), no
    transposed copies.
    """
    return Bmm.apply(a, b, trans_a, trans_b)


class BmmScaled(torch.autograd.Function):
    """Scaled batched product with the range-loss flag (bk_bmm_scaled); see ``bmm_scaled``."""

    @staticmethod
    def forward(ctx, a, b, scale, trans_a, trans_b):
        a, b, shape = _bmm_operands(ctx, a, b, trans_a, trans_b, "bmm_scaled")
        batch, m, n, p, trans_a, trans_b = ctx.geometry
        buf, range_loss = bufkern.bmm_scaled(
            a, b, batch=batch, m=m, n=n, p=p, trans_a=trans_a, trans_b=trans_b, scale=scale, ctx=context_for(a.device)
        )
        ctx.scale = scale
        ctx.save_for_backward(a, b)
        flag = torch.tensor(bool(range_loss))
        ctx.mark_non_differentiable(flag)
        return _tensor(buf, shape), flag

    @staticmethod
    @once_differentiable
    def backward(ctx, g, _flag):
        batch = ctx.geometry[0]
        bctx = context_for(g.device)

        def product(x, y, m, n, p, ta, tb):
            buf, _ = bufkern.bmm_scaled(
                x, y, batch=batch, m=m, n=n, p=p, trans_a=ta, trans_b=tb, scale=ctx.scale, ctx=bctx
            )
            return _tensor(buf, (batch, m, p))

        return (*_bmm_vjp(ctx, product, g), None, None, None)


def bmm_scaled(
    a: torch.Tensor, b: torch.Tensor, scale: float, trans_a: bool = False, trans_b: bool = False
) -> Tuple[torch.Tensor, bool]:
    """C = scale * op(a) op(b) computed without overflow or underflow on the way
    (the scale is split between the operands in powers of two), and the
    library's range-loss flag.

    Shapes and dtypes as for ``bmm``; scale finite and > 0. Returns (C,
    range_loss), range_loss a bool: an input or result entry is non-finite or
    below the smallest normal, or the product may exceed the dtype's range.
    Synchronizes once per call to read the flag.

    Forward: bk_bmm_scaled. Backward: bk_bmm_scaled with the same scale for
    da = scale * g op(b)^T and db = scale * op(a)^T g (their flags are dropped).
    """
    out, flag = BmmScaled.apply(a, b, scale, trans_a, trans_b)
    return out, bool(flag)


# ---------------------------------------------------------------------------
# Diagonal selective scans
# ---------------------------------------------------------------------------


def _scan_function(name, doc, forward_primitive, backward_primitive):
    """An autograd Function over a scan primitive and its library backward,
    which takes (A, B, X, h0, out, dy) and returns (dA, dB, dX, dh0)."""

    def forward(ctx, A, B, X, h0):
        if X.dim() != 2:
            raise ValueError(
                f"bufkern.torch.{forward_primitive.__name__}: X must be (seq_len, state), "
                f"got shape {tuple(X.shape)}"
            )
        seq_len, state = int(X.shape[0]), int(X.shape[1])
        A, B, X, h0 = _arg(A), _arg(B), _arg(X), _arg(h0)
        buf = forward_primitive(A, B, X, h0, seq_len=seq_len, state=state, ctx=context_for(X.device))
        out = _tensor(buf, (seq_len, state))
        ctx.geometry = (seq_len, state)
        ctx.save_for_backward(A, B, X, h0, out)
        return out

    def backward(ctx, dy):
        # The saved output unpacks as the tensor autograd tracks: detached here for DLPack.
        A, B, X, h0, out = (_arg(t) for t in ctx.saved_tensors)
        seq_len, state = ctx.geometry
        grads = backward_primitive(
            A, B, X, h0, out, _arg(dy), seq_len=seq_len, state=state, ctx=context_for(X.device)
        )
        return tuple(_tensor(d, t.shape) for d, t in zip(grads, (A, B, X, h0)))

    members = {
        "__doc__": doc,
        "__module__": __name__,
        "forward": staticmethod(forward),
        "backward": staticmethod(once_differentiable(backward)),
    }
    return type(name, (torch.autograd.Function,), members)


ScanDiag = _scan_function(
    "ScanDiag",
    "Diagonal linear scan with shared coefficients (bk_scan_diag); see ``scan_diag``.",
    bufkern.scan_diag,
    bufkern.scan_diag_backward,
)
ScanDiagVar = _scan_function(
    "ScanDiagVar",
    "Diagonal linear scan with token-dependent coefficients (bk_scan_diag_var); see ``scan_diag_var``.",
    bufkern.scan_diag_var,
    bufkern.scan_diag_var_backward,
)


def scan_diag(A: torch.Tensor, B: torch.Tensor, X: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h[t] = A * h[t-1] + B * X[t], h[-1] = h0, elementwise over the state.

    A, B, h0: (state,); X: (seq_len, state); one dtype, float32 or float64.
    Returns h (seq_len, state).

    Forward: bk_scan_diag. Backward: bk_scan_diag_backward on the saved inputs
    and output gives dA, dB, dX and dh0 in one call.
    """
    return ScanDiag.apply(A, B, X, h0)


def scan_diag_var(A: torch.Tensor, B: torch.Tensor, X: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h[t] = A[t] * h[t-1] + B[t] * X[t], h[-1] = h0, elementwise over the state.

    A, B, X: (seq_len, state); h0: (state,); one dtype, float32 or float64.
    Returns h (seq_len, state).

    Forward: bk_scan_diag_var. Backward: bk_scan_diag_var_backward on the saved
    inputs and output gives dA, dB, dX and dh0 in one call.
    """
    return ScanDiagVar.apply(A, B, X, h0)


# ---------------------------------------------------------------------------
# Broadcasts and layout
# ---------------------------------------------------------------------------


def _axis_map(in_rank: int, out_rank: int, axis_map, fn: str) -> Tuple[int, ...]:
    """The library's axis_map: as given, or numpy's rule (input axes aligned to
    the trailing output axes, leading output axes inserted)."""
    if axis_map is not None:
        return tuple(int(v) for v in axis_map)
    if in_rank > out_rank:
        raise ValueError(
            f"bufkern.torch.{fn}: cannot broadcast rank {in_rank} to rank {out_rank} without an axis_map"
        )
    lead = out_rank - in_rank
    return tuple(0 if j < lead else j - lead + 1 for j in range(out_rank))


def _broadcast(primitive, t, geometry, result_dims):
    """bk_broadcast_to or bk_broadcast_to_adjoint of t with geometry (in_dims,
    out_dims, axis_map), shaped result_dims."""
    in_dims, out_dims, amap = geometry
    buf = primitive(_arg(t), in_dims=in_dims, out_dims=out_dims, axis_map=amap, ctx=context_for(t.device))
    return _tensor(buf, result_dims)


class BroadcastTo(torch.autograd.Function):
    """Broadcast through an axis map (bk_broadcast_to); see ``broadcast_to``."""

    @staticmethod
    def forward(ctx, x, out_dims, axis_map):
        in_dims = tuple(int(d) for d in x.shape)
        out_dims = tuple(int(d) for d in out_dims)
        ctx.geometry = (in_dims, out_dims, _axis_map(len(in_dims), len(out_dims), axis_map, "broadcast_to"))
        return _broadcast(bufkern.broadcast_to, x, ctx.geometry, out_dims)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _broadcast(bufkern.broadcast_to_adjoint, g, ctx.geometry, ctx.geometry[0]), None, None


def broadcast_to(x: torch.Tensor, out_dims: Sequence[int], axis_map: Optional[Sequence[int]] = None) -> torch.Tensor:
    """x broadcast to the shape out_dims.

    axis_map has one entry per output axis: 0 inserts that axis, a+1 reads input
    axis a (which must have extent 1 or the output's extent; input axes may be
    permuted). None applies numpy's rule: input axes align with the trailing
    output axes. x: any shape, float32 or float64. Returns a tensor of shape
    out_dims.

    Forward: bk_broadcast_to. Backward: bk_broadcast_to_adjoint with the same
    geometry (the sum over every output coordinate that read an input entry).
    """
    return BroadcastTo.apply(x, out_dims, axis_map)


class BroadcastToAdjoint(torch.autograd.Function):
    """The sum-adjoint of broadcast_to (bk_broadcast_to_adjoint); see ``broadcast_to_adjoint``."""

    @staticmethod
    def forward(ctx, dout, in_dims, axis_map):
        in_dims = tuple(int(d) for d in in_dims)
        out_dims = tuple(int(d) for d in dout.shape)
        ctx.geometry = (in_dims, out_dims, _axis_map(len(in_dims), len(out_dims), axis_map, "broadcast_to_adjoint"))
        return _broadcast(bufkern.broadcast_to_adjoint, dout, ctx.geometry, in_dims)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _broadcast(bufkern.broadcast_to, g, ctx.geometry, ctx.geometry[1]), None, None


def broadcast_to_adjoint(
    dout: torch.Tensor, in_dims: Sequence[int], axis_map: Optional[Sequence[int]] = None
) -> torch.Tensor:
    """The adjoint of ``broadcast_to(x, dout.shape, axis_map)`` for x of shape
    in_dims: each result entry is the sum of the dout entries that read it
    (accumulated in float64, rounded once).

    dout: the broadcast shape, float32 or float64; axis_map as for
    ``broadcast_to`` (None: numpy's rule). Returns a tensor of shape in_dims.

    Forward: bk_broadcast_to_adjoint. Backward: bk_broadcast_to with the same
    geometry (the adjoint of the adjoint).
    """
    return BroadcastToAdjoint.apply(dout, in_dims, axis_map)


def _swapped(dims, depth):
    dims = list(dims)
    dims[depth], dims[depth + 1] = dims[depth + 1], dims[depth]
    return tuple(dims)


class SwapAdjacent(torch.autograd.Function):
    """Transpose of two adjacent axes (bk_swap_adjacent); see ``swap_adjacent``."""

    @staticmethod
    def forward(ctx, x, depth):
        if not 0 <= depth < x.dim() - 1:
            raise ValueError(f"bufkern.torch.swap_adjacent: depth = {depth} is outside [0, {x.dim() - 1})")
        x = _arg(x)
        dims = tuple(int(d) for d in x.shape)
        ctx.geometry = (_swapped(dims, depth), depth)
        return _tensor(bufkern.swap_adjacent(x, dims=dims, depth=depth, ctx=context_for(x.device)), ctx.geometry[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        dims, depth = ctx.geometry
        buf = bufkern.swap_adjacent(_arg(g), dims=dims, depth=depth, ctx=context_for(g.device))
        return _tensor(buf, _swapped(dims, depth)), None


def swap_adjacent(x: torch.Tensor, depth: int) -> torch.Tensor:
    """x with axes depth and depth+1 exchanged, as a new contiguous tensor
    (``x.transpose(depth, depth + 1).contiguous()``).

    x: at least 2 axes, float32 or float64; 0 <= depth < x.dim() - 1.

    Forward: bk_swap_adjacent. Backward: bk_swap_adjacent of the cotangent, the
    same swap undone.
    """
    return SwapAdjacent.apply(x, depth)


class SumAxis(torch.autograd.Function):
    """Sum over one axis (bk_sum_axis); see ``sum_axis``."""

    @staticmethod
    def forward(ctx, x, axis):
        x = _arg(x)
        dims = tuple(int(d) for d in x.shape)
        axis = 0 if not dims and axis in (0, -1) else _axis(axis, len(dims), "axis", "sum_axis")
        out_dims = tuple(d for i, d in enumerate(dims) if i != axis)
        # broadcast_to from out_dims back to dims: the summed axis is inserted,
        # the others read in order.
        amap = tuple(0 if j == axis else (j + 1 if j < axis else j) for j in range(len(dims)))
        ctx.geometry = (out_dims, dims, amap)
        return _tensor(bufkern.sum_axis(x, dims=dims, axis=axis, ctx=context_for(x.device)), out_dims)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        return _broadcast(bufkern.broadcast_to, g, ctx.geometry, ctx.geometry[1]), None


def sum_axis(x: torch.Tensor, axis: int) -> torch.Tensor:
    """Sum of x over `axis` (negative counting from the end), the axis removed,
    in index order with float64 accumulation.

    x: any shape, float32 or float64 (a 0-d x with axis 0 gives a copy).
    Returns a tensor of x's shape without `axis`.

    Forward: bk_sum_axis. Backward: bk_broadcast_to of the cotangent back along
    the summed axis.
    """
    return SumAxis.apply(x, axis)


# ---------------------------------------------------------------------------
# Gather and scatter-add of rows
# ---------------------------------------------------------------------------


def _matrix(mat, name, fn):
    if mat.dim() != 2:
        raise ValueError(f"bufkern.torch.{fn}: {name} must be (rows, cols), got shape {tuple(mat.shape)}")
    return int(mat.shape[0]), int(mat.shape[1])


class RowsGather(torch.autograd.Function):
    """Gather of rows by host indices (bk_rows_gather); see ``rows_gather``."""

    @staticmethod
    def forward(ctx, mat, indices):
        rows, cols = _matrix(mat, "mat", "rows_gather")
        idx = _host_indices(indices)
        mat = _arg(mat)
        buf = bufkern.rows_gather(mat, rows=rows, cols=cols, indices=idx, ctx=context_for(mat.device))
        ctx.geometry = (rows, cols, idx)
        return _tensor(buf, (len(idx), cols))

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        rows, cols, idx = ctx.geometry
        zeros = torch.zeros((rows, cols), dtype=g.dtype, device=g.device)
        buf = bufkern.rows_scatter_add(zeros, _arg(g), rows=rows, cols=cols, indices=idx, ctx=context_for(g.device))
        return _tensor(buf, (rows, cols)), None


def rows_gather(mat: torch.Tensor, indices) -> torch.Tensor:
    """out[r] = mat[indices[r]], or an exact +0 row where indices[r] >= rows.

    mat: (rows, cols), float32 or float64. indices: k non-negative integers (a
    sequence, numpy array or integer tensor; the library reads them from host
    memory, so a CUDA index tensor is copied to the host). Returns (k, cols).

    Forward: bk_rows_gather. Backward: bk_rows_scatter_add of the cotangent into
    zeros at the same indices (out-of-range indices are skipped, as their rows
    read nothing).
    """
    return RowsGather.apply(mat, indices)


class RowsScatterAdd(torch.autograd.Function):
    """Scatter-add of rows by host indices (bk_rows_scatter_add); see ``rows_scatter_add``."""

    @staticmethod
    def forward(ctx, mat, values, indices):
        rows, cols = _matrix(mat, "mat", "rows_scatter_add")
        idx = _host_indices(indices)
        mat, values = _arg(mat), _arg(values)
        buf = bufkern.rows_scatter_add(
            mat, values, rows=rows, cols=cols, indices=idx, ctx=context_for(mat.device)
        )
        ctx.geometry = (rows, cols, idx, values.shape)
        return _tensor(buf, (rows, cols))

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        rows, cols, idx, values_shape = ctx.geometry
        dvalues = None
        if ctx.needs_input_grad[1]:
            buf = bufkern.rows_gather(_arg(g), rows=rows, cols=cols, indices=idx, ctx=context_for(g.device))
            dvalues = _tensor(buf, values_shape)
        return g, dvalues, None


def rows_scatter_add(mat: torch.Tensor, values: torch.Tensor, indices) -> torch.Tensor:
    """mat with values[r] added into row indices[r] for every in-range index
    (out-of-range ones are ignored; repeated indices fold in increasing r).

    mat: (rows, cols); values: (k, cols); one dtype, float32 or float64.
    indices: k non-negative integers, read from host memory as for
    ``rows_gather``. Returns (rows, cols).

    Forward: bk_rows_scatter_add. Backward: dmat is the cotangent itself;
    dvalues is bk_rows_gather of the cotangent at the same indices (+0 rows for
    the ignored indices).
    """
    return RowsScatterAdd.apply(mat, values, indices)


# ---------------------------------------------------------------------------
# Real FFTs
# ---------------------------------------------------------------------------


def _bin_weights(n: int, inner: float, edge: float, like: torch.Tensor) -> torch.Tensor:
    """(n//2+1, 1) weights: `edge` for bin 0 and, for even n, bin n/2 (the bins
    whose imaginary parts the inverse transform ignores), `inner` for the others."""
    w = torch.full((n // 2 + 1, 1), inner, dtype=like.dtype, device=like.device)
    w[0] = edge
    if n % 2 == 0:
        w[-1] = edge
    return w


class Rfft(torch.autograd.Function):
    """Real FFT to a packed half spectrum (bk_rfft); see ``rfft``."""

    @staticmethod
    def forward(ctx, x):
        if x.dim() < 1:
            raise ValueError("bufkern.torch.rfft: x must have at least one axis, got a 0-d tensor")
        n = int(x.shape[-1])
        batch = _prod(x.shape[:-1])
        ctx.geometry = (batch, n, x.shape)
        buf = bufkern.rfft(_arg(x).reshape(batch, n), batch=batch, n=n, ctx=context_for(x.device))
        return _tensor(buf, (*x.shape[:-1], n // 2 + 1, 2))

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        batch, n, x_shape = ctx.geometry
        # sum_t x[t] irfft_unnormalized(Y)[t] = sum_k w_k <X_k, Y_k> with w_k = 1
        # on the edge bins and 2 elsewhere, so the VJP of rfft is
        # irfft_unnormalized(g / w).
        scaled = (g * _bin_weights(n, 0.5, 1.0, g)).reshape(batch, n // 2 + 1, 2)
        buf = bufkern.irfft_unnormalized(scaled, batch=batch, n=n, ctx=context_for(g.device))
        return _tensor(buf, x_shape)


def rfft(x: torch.Tensor) -> torch.Tensor:
    """The unnormalized real FFT over the last axis, as a packed half spectrum:
    X[k] = sum_t x[t] exp(-2 pi i k t / n), k = 0..n//2, stored as [re, im].

    x: (..., n), n >= 1, float32 or float64. Returns (..., n//2 + 1, 2) (what
    ``torch.view_as_real(torch.fft.rfft(x))`` gives).

    Forward: bk_rfft. Backward: bk_irfft_unnormalized of the cotangent with
    the inner bins halved (a torch multiply), from the adjoint relation the
    library documents for the pair.
    """
    return Rfft.apply(x)


class Irfft(torch.autograd.Function):
    """Inverse real FFT from a packed half spectrum (bk_irfft, bk_irfft_unnormalized); see ``irfft``."""

    @staticmethod
    def forward(ctx, spec, n, normalized):
        if spec.dim() < 2 or spec.shape[-1] != 2 or spec.shape[-2] != n // 2 + 1:
            raise ValueError(
                f"bufkern.torch.irfft: spec must be (..., n//2 + 1, 2) = (..., {n // 2 + 1}, 2) for n = {n}, "
                f"got shape {tuple(spec.shape)}"
            )
        batch = _prod(spec.shape[:-2])
        primitive = bufkern.irfft if normalized else bufkern.irfft_unnormalized
        ctx.geometry = (batch, n, normalized, spec.shape)
        buf = primitive(_arg(spec).reshape(batch, n // 2 + 1, 2), batch=batch, n=n, ctx=context_for(spec.device))
        return _tensor(buf, (*spec.shape[:-2], n))

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        batch, n, normalized, spec_shape = ctx.geometry
        buf = bufkern.rfft(_arg(g).reshape(batch, n), batch=batch, n=n, ctx=context_for(g.device))
        # The adjoint relation of the pair, read the other way: the VJP of
        # irfft_unnormalized is w * rfft(g); irfft adds the 1/n. The edge bins'
        # imaginary parts, which the transform ignores, come out of bk_rfft as
        # exact zeros.
        scale = 1.0 / n if normalized else 1.0
        return _tensor(buf, spec_shape) * _bin_weights(n, 2.0 * scale, scale, g), None, None


def irfft(spec: torch.Tensor, n: int) -> torch.Tensor:
    """The inverse of ``rfft``, with the 1/n factor: a packed half spectrum of
    length-n real signals back to the signals.

    spec: (..., n//2 + 1, 2) of [re, im], float32 or float64; the imaginary
    parts of bin 0 and, for even n, bin n/2 are ignored (their gradient is 0).
    Returns (..., n).

    Forward: bk_irfft. Backward: bk_rfft of the cotangent, weighted per bin
    (1/n on the edge bins, 2/n elsewhere; a torch multiply).
    """
    return Irfft.apply(spec, n, True)


def irfft_unnormalized(spec: torch.Tensor, n: int) -> torch.Tensor:
    """``irfft`` without the 1/n factor (n times irfft).

    Shapes and dtypes as for ``irfft``. Forward: bk_irfft_unnormalized.
    Backward: bk_rfft of the cotangent, weighted per bin (1 on the edge bins,
    2 elsewhere; a torch multiply).
    """
    return Irfft.apply(spec, n, False)


# ---------------------------------------------------------------------------
# Grouped convolution
# ---------------------------------------------------------------------------


def _per_axis(value, default, rank, name):
    if value is None:
        return (default,) * rank
    if isinstance(value, int):
        return (value,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise ValueError(f"bufkern.torch.conv: {name} has {len(value)} entries, expected spatial rank {rank}")
    return value


@functools.lru_cache(maxsize=64)
def _patch_indices(n, c_in, groups, in_spatial, k_spatial, out_spatial, stride, pad_before, dilation):
    """Host indices of the patch matrix (im2col) of a convolution.

    Entry (g, ic, kk..., b, s...) of the (groups, C_in/groups * K, N * S) patch
    matrix is the flat input position read by group g's input channel ic at
    kernel offset kk for output position s of batch entry b, or the input's
    length (out of range: bk_rows_gather reads it as +0 and bk_rows_scatter_add
    skips it) where that position falls in the zero padding. Only geometry goes
    into it, so it is cached per geometry.
    """
    r = len(in_spatial)
    length = n * c_in * _prod(in_spatial)
    shape_rank = 2 * r + 3  # (g, ic, k_1..k_r, b, s_1..s_r)
    linear = np.zeros((1,) * shape_rank, dtype=np.int64)
    valid = np.ones((1,) * shape_rank, dtype=bool)
    for a in range(r):
        kk = np.arange(k_spatial[a]).reshape(-1, 1)
        s = np.arange(out_spatial[a]).reshape(1, -1)
        pos = s * stride[a] + kk * dilation[a] - pad_before[a]
        shape = [1] * shape_rank
        shape[2 + a], shape[3 + r + a] = k_spatial[a], out_spatial[a]
        pos = pos.reshape(shape)
        linear = linear * in_spatial[a] + pos
        valid = valid & (pos >= 0) & (pos < in_spatial[a])
    cg = c_in // groups
    channel = (np.arange(groups).reshape(-1, 1) * cg + np.arange(cg).reshape(1, -1)).reshape(
        (groups, cg) + (1,) * (2 * r + 1)
    )
    batch = np.arange(n).reshape((1, 1) + (1,) * r + (n,) + (1,) * r)
    flat = (batch * c_in + channel) * _prod(in_spatial) + linear
    flat = np.ascontiguousarray(np.where(valid, flat, length).reshape(-1), dtype=np.uint64)
    flat.flags.writeable = False  # shared by every call with this geometry
    return flat


def _block_rows(c_out: int, groups: int) -> np.ndarray:
    """Rows of the dense (C_out, C_in, k...) kernel, viewed as (C_out * groups,
    C_in/groups * K), that hold each output channel's own group block."""
    oc = np.arange(c_out)
    return (oc * groups + oc // (c_out // groups)).astype(np.uint64)


class Conv(torch.autograd.Function):
    """Grouped convolution (bk_conv); see ``conv``."""

    @staticmethod
    def forward(ctx, x, kernel, bias, stride, pad_before, pad_after, dilation, groups):
        r = kernel.dim() - 2
        if r < 1 or r > 3 or x.dim() < r + 1:
            raise ValueError(
                f"bufkern.torch.conv: kernel (C_out, C_in, k...) of shape {tuple(kernel.shape)} and input "
                f"(batch..., C_in, s...) of shape {tuple(x.shape)} need 1 to 3 spatial axes"
            )
        stride = _per_axis(stride, 1, r, "stride")
        pad_before = _per_axis(pad_before, 0, r, "pad_before")
        pad_after = _per_axis(pad_after, 0, r, "pad_after")
        dilation = _per_axis(dilation, 1, r, "dilation")
        x, kernel = _arg(x), _arg(kernel)
        bias = None if bias is None else _arg(bias)
        buf = bufkern.conv(
            x, kernel, bias, input_dims=tuple(x.shape), kernel_dims=tuple(kernel.shape), stride=stride,
            pad_before=pad_before, pad_after=pad_after, dilation=dilation, groups=groups,
            ctx=context_for(x.device),
        )
        in_spatial = tuple(int(d) for d in x.shape[x.dim() - r:])
        k_spatial = tuple(int(d) for d in kernel.shape[2:])
        out_spatial = tuple(
            0 if i + b + e < (k - 1) * d + 1 else (i + b + e - (k - 1) * d - 1) // s + 1
            for i, b, e, k, d, s in zip(in_spatial, pad_before, pad_after, k_spatial, dilation, stride)
        )
        batch_axes = tuple(int(d) for d in x.shape[: x.dim() - r - 1])
        c_out, c_in = int(kernel.shape[0]), int(kernel.shape[1])
        ctx.geometry = (
            _prod(batch_axes), c_in, c_out, groups, in_spatial, k_spatial, out_spatial,
            stride, pad_before, dilation, bias is not None,
        )
        ctx.save_for_backward(x, kernel)
        return _tensor(buf, (*batch_axes, c_out, *out_spatial))

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, kernel = ctx.saved_tensors
        (n, c_in, c_out, groups, in_spatial, k_spatial, out_spatial, stride, pad_before, dilation,
         has_bias) = ctx.geometry
        bctx = context_for(g.device)
        s, cg, cog, k = _prod(out_spatial), c_in // groups, c_out // groups, _prod(k_spatial)
        g = _arg(g).reshape(n, c_out, s)
        dx = dkernel = dbias = None
        if has_bias and ctx.needs_input_grad[2]:
            dbias = _tensor(
                bufkern.broadcast_to_adjoint(
                    g, in_dims=(c_out,), out_dims=(n, c_out, s), axis_map=(0, 1, 0), ctx=bctx
                ),
                (c_out,),
            )
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return dx, dkernel, dbias, None, None, None, None, None
        # The cotangent as (groups, C_out/groups, N * S): two adjacent swaps of
        # (N, groups, C_out/groups, S), each skipped when one of its axes is 1.
        gt = g
        if n > 1 and groups > 1:
            gt = _tensor(
                bufkern.swap_adjacent(gt.reshape(n, groups, cog * s), dims=(n, groups, cog * s), depth=0, ctx=bctx),
                (groups, n, cog * s),
            )
        if n > 1 and cog > 1:
            gt = _tensor(
                bufkern.swap_adjacent(gt.reshape(groups, n, cog, s), dims=(groups, n, cog, s), depth=1, ctx=bctx),
                (groups, cog, n * s),
            )
        gt = gt.reshape(groups, cog, n * s)
        idx = _patch_indices(n, c_in, groups, in_spatial, k_spatial, out_spatial, stride, pad_before, dilation)
        length = x.numel()
        blocks = _block_rows(c_out, groups) if groups > 1 else None
        if ctx.needs_input_grad[1]:
            # dW[g] = cotangent[g] (C_out/groups, N*S) x patches[g]^T (N*S, C_in/groups * K).
            patches = bufkern.rows_gather(x.reshape(length, 1), rows=length, cols=1, indices=idx, ctx=bctx)
            patches = _tensor(patches, (groups, cg * k, n * s))
            dw = bufkern.bmm(
                gt, patches, batch=groups, m=cog, n=n * s, p=cg * k, trans_a=False, trans_b=True, ctx=bctx
            )
            if blocks is not None:
                zeros = torch.zeros((c_out * groups, cg * k), dtype=g.dtype, device=g.device)
                dw = bufkern.rows_scatter_add(
                    zeros, _tensor(dw, (c_out, cg * k)), rows=c_out * groups, cols=cg * k, indices=blocks, ctx=bctx
                )
            dkernel = _tensor(dw, kernel.shape)
        if ctx.needs_input_grad[0]:
            # dpatches[g] = W[g]^T (C_in/groups * K, C_out/groups) x cotangent[g],
            # then each patch entry is added back where it was read from.
            if blocks is None:
                w = kernel.reshape(1, c_out, c_in * k)
            else:
                w = bufkern.rows_gather(
                    kernel.reshape(c_out * groups, cg * k), rows=c_out * groups, cols=cg * k, indices=blocks, ctx=bctx
                )
                w = _tensor(w, (groups, cog, cg * k))
            dpatches = bufkern.bmm(
                w, gt, batch=groups, m=cg * k, n=cog, p=n * s, trans_a=True, trans_b=False, ctx=bctx
            )
            zeros = torch.zeros((length, 1), dtype=g.dtype, device=g.device)
            dx = bufkern.rows_scatter_add(
                zeros, _tensor(dpatches, (len(idx), 1)), rows=length, cols=1, indices=idx, ctx=bctx
            )
            dx = _tensor(dx, x.shape)
        return dx, dkernel, dbias, None, None, None, None, None


def conv(
    x: torch.Tensor,
    kernel: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride=None,
    pad_before=None,
    pad_after=None,
    dilation=None,
    groups: int = 1,
) -> torch.Tensor:
    """Grouped convolution (cross-correlation, as in ML frameworks) over 1 to 3
    spatial axes, with stride, dilation and asymmetric zero padding.

    x: (batch axes..., C_in, s_1..s_r), the batch axes optional; kernel:
    (C_out, C_in, k_1..k_r), the library's dense layout: output channel oc, in
    group g = oc // (C_out/groups), reads only input channels g*(C_in/groups) up
    to (g+1)*(C_in/groups) - 1, so the other blocks are never read (their
    gradient is 0). A torch grouped weight (C_out, C_in/groups, k...) goes on the
    diagonal blocks. bias: (C_out,) or None. stride, pad_before, pad_after,
    dilation: one int for every axis, or one entry per spatial axis (defaults 1,
    0, 0, 1). One dtype, float32 or float64. Returns (batch axes..., C_out,
    out_1..out_r) with out = (in + before + after - ((k-1)*dil + 1)) // stride + 1
    (0 when the padded input is shorter than the dilated kernel).

    Forward: bk_conv. Backward, composed from library primitives through the
    patch matrix of the convolution (host index geometry, cached): dbias is
    bk_broadcast_to_adjoint of the cotangent; the cotangent is laid out per
    group with bk_swap_adjacent; dkernel = bk_bmm(cotangent, bk_rows_gather(x
    at the patch indices)^T), placed on the kernel's diagonal blocks with
    bk_rows_scatter_add when groups > 1; dx = bk_rows_scatter_add of
    bk_bmm(kernel blocks^T, cotangent) into zeros at the patch indices.
    """
    return Conv.apply(x, kernel, bias, stride, pad_before, pad_after, dilation, groups)

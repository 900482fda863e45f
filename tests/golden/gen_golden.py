#!/usr/bin/env python3
"""gen_golden.py - writes bufkern's golden vectors (tests/golden/*.txt).

Every primitive of include/bufkern.h is run on small random and edge-case
inputs by an independent float64 reference, and the inputs and expected
results are written as plain text that tests/test_golden.c reads and replays
on the device under test, in both dtypes.

Two references compute the expected values from the same cases:
  --backend numpy   a pure-numpy float64 implementation written from the contract
                    section 3 (loops where the contract is literal about an
                    order or a comparison rule); needs only numpy.
  --backend torch   the same functions composed from ATen operators on CPU
                    torch in float64 (torch.softmax, F.conv*d, torch.fft,
                    native_layer_norm, autograd for the gradients, ...),
                    patched to the contract where ATen differs on purpose;
                    each such case carries a `note` saying why.
The cases (inputs, geometry, tolerances, notes) never depend on the backend:
inputs come from fixed per-family seeds and tolerance scales are computed with
numpy, so regenerating with the other backend changes only the `source` line
and the expected values. `--compare` (torch backend only) also evaluates the
numpy reference and reports every case where the two disagree.

A float32 case holds the float64 draws rounded to float32; its expected
values are the float64 reference on those rounded inputs, rounded once to
float32. Values are printed so that they read back bit for bit (shortest
round-trip form of the dtype), with nan, inf and -inf spelled out.

File format (one file per family; `#` starts a comment line):
  source <numpy|torch>
  case <name> <primitive> <f32|f64>
  note <free text>                 why a value deviates from plain ATen, etc.
  int <label> <n> v...             integer arguments (sizes, dims, indices)
  f <label> <n> v...               a buffer argument in the case's dtype
  d <label> <n> v...               a double argument (eps, scale)
  status <code> <needle>           the call must fail with this status and a
                                   message mentioning needle (no expects)
  tol <kind> <scale>               kind: exact | elem | red | contract:<n>;
                                   applies to the expects that follow
  expect <label> <n> v...          an output of the primitive
  zeros <label> <n> i...           entries of that output that must be +0
  end
A buffer label absent from a case means a NULL buffer (the conv bias); an
`int indices 0` means a NULL index array.

  python3 tests/golden/gen_golden.py --backend numpy      # writes tests/golden
  python3 tests/golden/gen_golden.py --backend torch --compare
  python3 tests/golden/gen_golden.py --self-test
"""

import argparse
import itertools
import math
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("f64", "f32")
F32_TINY = float(np.finfo(np.float32).tiny)
F32_MAX = float(np.finfo(np.float32).max)
F64_TINY = float(np.finfo(np.float64).tiny)
F64_MAX = float(np.finfo(np.float64).max)

ST_INVALID = 100  # BK_ERR_INVALID_ARGUMENT

NAN = float("nan")
INF = float("inf")


# ---- case description ----------------------------------------------------------------


class F:
    """A buffer argument (float values, stored in the case's dtype)."""

    def __init__(self, values):
        self.v = np.asarray(values, dtype=np.float64).ravel()


class D:
    """A double-valued argument (eps, scale)."""

    def __init__(self, value):
        self.v = float(value)


class Derived:
    """A buffer argument computed from the other (already rounded) arguments
    by the numpy reference, e.g. a backward pass's saved forward values. It is
    part of the case, so it never depends on the backend."""

    def __init__(self, fn):
        self.fn = fn


class Case:
    def __init__(self, name, prim, args, dtypes=DTYPES, status=None, needle=None, note=None,
                 check=None, hidden=None):
        self.name = name
        self.prim = prim
        self.args = args  # ordered dict: label -> int | list[int] | F | D | Derived | None
        # Values that only feed Derived arguments (a forward pass's inputs):
        # rounded to the dtype like the arguments, never written or passed.
        self.hidden = hidden or {}
        self.dtypes = dtypes
        self.status = status
        self.needle = needle
        self.notes = [note] if isinstance(note, str) else list(note or [])
        self.check = check or {}  # label -> contract example values (validated at generation)


def rnd(dtype, a):
    """Rounds float64 values to the dtype (float32 overflows to inf)."""
    a = np.asarray(a, dtype=np.float64)
    if dtype == "f32":
        with np.errstate(over="ignore", invalid="ignore"):
            return a.astype(np.float32).astype(np.float64)
    return a.copy()


def materialize(case, dtype):
    """The call's arguments for one dtype: ints as int / list, buffers as
    float64 arrays holding values representable in the dtype."""
    out = {}
    derived = []
    for label, v in itertools.chain(case.hidden.items(), case.args.items()):
        if v is None:
            continue
        if isinstance(v, F):
            out[label] = rnd(dtype, v.v)
        elif isinstance(v, D):
            out[label] = v.v
        elif isinstance(v, Derived):
            derived.append(label)
        elif isinstance(v, (list, tuple)):
            out[label] = [int(i) for i in v]
        else:
            out[label] = int(v)
    for label in derived:
        out[label] = rnd(dtype, np.asarray(case.args[label].fn(out), dtype=np.float64).ravel())
    for label in case.hidden:
        del out[label]
    return out


def arg_kind(v):
    if isinstance(v, (F, Derived)):
        return "f"
    if isinstance(v, D):
        return "d"
    return "int"


# ---- numpy reference (written from contract section 3) ------------------------------------------


def mul0(a, b):
    """a*b with 0*inf = 0: the reading of contract §3.2 ("a zero weight contributes
    exactly 0"); NaN still propagates."""
    if (a == 0 and math.isinf(b)) or (b == 0 and math.isinf(a)):
        return 0.0
    return a * b


def prod(dims):
    p = 1
    for d in dims:
        p *= int(d)
    return p


class NumpyRef:
    name = "numpy"

    # 3.1
    def softmax(self, x, dims, axis):
        if x.size == 0:
            return {"out": x.copy()}
        t = x.reshape(dims)
        m = np.max(t, axis=axis, keepdims=True)  # NaN propagates: the fibre is NaN anyway
        e = np.exp(t - m)
        return {"out": (e / np.sum(e, axis=axis, keepdims=True)).ravel()}

    # 3.2
    def xent_weighted_mean(self, logits, weights, rows, cols):
        total = 0.0
        x = logits.reshape(rows, cols)
        w = weights.reshape(rows, cols)
        for r in range(rows):
            if cols == 0:
                continue
            m = float(np.max(x[r]))
            lse = m + float(np.log(np.sum(np.exp(x[r] - m))))
            for c in range(cols):
                xv, wv = float(x[r, c]), float(w[r, c])
                d = lse - xv
                term = wv * d
                if not math.isfinite(d):
                    term = mul0(wv, lse) - mul0(wv, xv)
                total += term
        return {"out": np.array([total / max(rows, 1)])}

    # 3.3
    def xent_teacher(self, student, teacher, rows, cols, gradient):
        if rows == 0 or cols == 0:
            return {"out": np.zeros(0) if gradient else np.zeros(1)}
        S = student.reshape(rows, cols)
        T = teacher.reshape(rows, cols)
        loss = 0.0
        grad = np.zeros((rows, cols))
        for r in range(rows):
            ms = float(np.max(S[r]))
            zs = float(np.sum(np.exp(S[r] - ms)))
            mt = float(np.max(T[r]))
            p = np.exp(T[r] - mt) / np.sum(np.exp(T[r] - mt))
            cross = 0.0
            for c in range(cols):
                cross += mul0(float(p[c]), float(S[r, c]) - ms)
            loss += float(np.log(zs)) - cross
            grad[r] = (np.exp(S[r] - ms) / zs - p) / max(rows, 1)
        if gradient:
            return {"out": grad.ravel()}
        return {"out": np.array([loss / max(rows, 1)])}

    # 3.4
    def conv(self, input, kernel, input_dims, kernel_dims, spatial_rank, stride, pad_before,
             pad_after, dilation, groups, bias=None):
        r = spatial_rank
        ch = len(input_dims) - r - 1
        N = prod(input_dims[:ch])
        C = input_dims[ch]
        sp = input_dims[ch + 1:]
        Cout = kernel_dims[0]
        ks = kernel_dims[2:]
        outs = []
        for a in range(r):
            padded = sp[a] + pad_before[a] + pad_after[a]
            eff = (ks[a] - 1) * dilation[a] + 1
            outs.append(0 if padded < eff else (padded - eff) // stride[a] + 1)
        if N * Cout * prod(outs) == 0:
            return {"out": np.zeros(0)}
        x = input.reshape([N, C] + list(sp))
        w = kernel.reshape(kernel_dims)
        xp = np.pad(x, [(0, 0), (0, 0)] + [(pad_before[a], pad_after[a]) for a in range(r)])
        iG, oG = C // groups, Cout // groups
        y = np.zeros([N, Cout] + outs)
        for g in range(groups):
            xs = xp[:, g * iG:(g + 1) * iG]
            for kap in itertools.product(*[range(k) for k in ks]):
                sl = [slice(None), slice(None)]
                for a in range(r):
                    start = kap[a] * dilation[a]
                    sl.append(slice(start, start + (outs[a] - 1) * stride[a] + 1, stride[a]))
                patch = xs[tuple(sl)]  # (N, iG, out...)
                wk = w[(slice(g * oG, (g + 1) * oG), slice(g * iG, (g + 1) * iG)) + kap]
                y[:, g * oG:(g + 1) * oG] += np.einsum("nj...,oj->no...", patch, wk)
        if bias is not None:
            y += bias.reshape([1, Cout] + [1] * r)
        return {"out": y.ravel()}

    # 3.5
    def rows_sum(self, x, rows, cols):
        return {"out": x.reshape(rows, cols).sum(axis=1) if cols else np.zeros(rows)}

    def rows_max(self, x, rows, cols):
        if cols == 0:
            return {"out": np.zeros(rows)}
        out = np.empty(rows)
        for r in range(rows):
            m = -INF
            for v in x[r * cols:(r + 1) * cols]:
                if v > m:  # NaN never compares greater: it is ignored
                    m = v
            out[r] = m
        return {"out": out}

    def rows_first_max_mask(self, x, rows, cols):
        out = np.zeros(rows * cols)
        for r in range(rows if cols else 0):
            row = x[r * cols:(r + 1) * cols]
            best = 0
            for i in range(1, cols):
                if row[i] > row[best]:
                    best = i
            out[r * cols + best] = 1.0
        return {"out": out}

    def rows_topk_mask(self, x, rows, cols, k):
        out = np.zeros(rows * cols)
        for r in range(rows):
            row = x[r * cols:(r + 1) * cols]
            for i in range(cols):
                beats = 0
                for j in range(cols):
                    if row[j] > row[i] or (not row[j] > row[i] and not row[i] > row[j] and j < i):
                        beats += 1
                out[r * cols + i] = 1.0 if beats < k else 0.0
        return {"out": out}

    def rows_masked_softmax(self, scores, mask, rows, cols):
        out = np.zeros(rows * cols)
        for r in range(rows):
            s = scores[r * cols:(r + 1) * cols]
            allowed = mask[r * cols:(r + 1) * cols] != 0  # NaN != 0: allowed
            if not allowed.any():
                continue
            a = s[allowed]
            m = np.max(a)
            e = np.exp(a - m)
            y = np.zeros(cols)
            y[allowed] = e / np.sum(e)
            out[r * cols:(r + 1) * cols] = y
        return {"out": out}

    # 3.6
    def vec_concat(self, a, b, n, m):
        return {"out": np.concatenate([a, b])}

    def vec_slice(self, x, n, start, len):
        return {"out": x[start:start + len].copy()}

    def broadcast_col(self, vec, rows, cols):
        out = np.empty(rows * cols)
        for i in range(rows):
            out[i * cols:(i + 1) * cols] = vec[i]
        return {"out": out}

    @staticmethod
    def _in_coord(o, in_dims, axis_map):
        ic = [0] * len(in_dims)
        for j, mp in enumerate(axis_map):
            if mp:
                a = mp - 1
                ic[a] = 0 if in_dims[a] == 1 else o[j]
        return tuple(ic)

    def broadcast_to(self, x, in_dims, out_dims, axis_map):
        xin = x.reshape(in_dims)
        out = np.empty(prod(out_dims))
        for flat, o in enumerate(np.ndindex(*out_dims)):
            out[flat] = xin[self._in_coord(o, in_dims, axis_map)]
        return {"out": out}

    def broadcast_to_adjoint(self, dout, in_dims, out_dims, axis_map):
        din = np.zeros(in_dims)
        for flat, o in enumerate(np.ndindex(*out_dims)):
            c = self._in_coord(o, in_dims, axis_map)
            din[c] = din[c] + dout[flat]
        return {"out": din.ravel()}

    def swap_adjacent(self, x, dims, depth):
        pre = prod(dims[:depth])
        post = prod(dims[depth + 2:])
        t = x.reshape(pre, dims[depth], dims[depth + 1], post)
        return {"out": np.ascontiguousarray(t.transpose(0, 2, 1, 3)).ravel()}

    def sum_axis(self, x, dims, axis):
        if len(dims) == 0:
            return {"out": x.copy()}
        t = x.reshape(dims)
        acc = np.zeros(dims[:axis] + dims[axis + 1:])
        for i in range(dims[axis]):
            acc = acc + np.take(t, i, axis=axis)
        return {"out": acc.ravel()}

    # 3.7
    def layernorm_forward(self, x, gamma, beta, rows, cols, eps):
        t = x.reshape(rows, cols)
        out = np.empty((rows, cols))
        nrm = np.empty((rows, cols))
        inv = np.empty(rows)
        for r in range(rows):
            mu = math.fsum(t[r]) / cols
            var = math.fsum((t[r] - mu) ** 2) / cols
            inv[r] = 1.0 / math.sqrt(var + eps)
            nrm[r] = (t[r] - mu) * inv[r]
            out[r] = nrm[r] * gamma + beta
        return {"out": out.ravel(), "normalized": nrm.ravel(), "inv_std": inv}

    def layernorm_backward(self, dout, normalized, inv_std, gamma, rows, cols):
        dy = dout.reshape(rows, cols)
        n = normalized.reshape(rows, cols)
        dx = np.empty((rows, cols))
        for r in range(rows):
            g = dy[r] * gamma
            s1 = math.fsum(g)
            s2 = math.fsum(g * n[r])
            dx[r] = inv_std[r] / cols * (cols * g - s1 - n[r] * s2)
        dgamma = np.zeros(cols)
        dbeta = np.zeros(cols)
        for r in range(rows):
            dgamma = dgamma + dy[r] * n[r]
            dbeta = dbeta + dy[r]
        return {"dx": dx.ravel(), "dgamma": dgamma, "dbeta": dbeta}

    # 3.8
    @staticmethod
    def _ops(A, B, batch, m, n, p, trans_a, trans_b):
        a = A.reshape(batch, n, m).transpose(0, 2, 1) if trans_a else A.reshape(batch, m, n)
        b = B.reshape(batch, p, n).transpose(0, 2, 1) if trans_b else B.reshape(batch, n, p)
        return a, b

    def bmm(self, A, B, batch, m, n, p, trans_a, trans_b):
        a, b = self._ops(A, B, batch, m, n, p, trans_a, trans_b)
        with np.errstate(all="ignore"):
            return {"out": np.einsum("bmn,bnp->bmp", a, b).ravel()}

    def bmm_scaled(self, A, B, batch, m, n, p, trans_a, trans_b, scale):
        a, b = self._ops(A, B, batch, m, n, p, trans_a, trans_b)
        sa, sb = split_scale(scale, A, B)
        with np.errstate(all="ignore"):
            return {"out": np.einsum("bmn,bnp->bmp", a * sa, b * sb).ravel()}

    # 3.9
    @staticmethod
    def _twiddles(n):
        k = np.arange(n // 2 + 1)
        t = np.arange(n)
        ang = 2.0 * np.pi * ((k[:, None] * t[None, :]) % n) / n  # (bins, n)
        return np.cos(ang), np.sin(ang)

    def rfft(self, x, batch, n):
        c, s = self._twiddles(n)
        xs = x.reshape(batch, n)
        out = np.empty((batch, n // 2 + 1, 2))
        out[:, :, 0] = np.einsum("bt,kt->bk", xs, c)
        out[:, :, 1] = -np.einsum("bt,kt->bk", xs, s)
        return {"out": out.ravel()}

    def _irfft(self, spec, batch, n):
        h = n // 2 + 1
        sp = spec.reshape(batch, h, 2)
        c, s = self._twiddles(n)
        w = np.full(h, 2.0)
        w[0] = 1.0
        if n % 2 == 0:
            w[n // 2] = 1.0
        re = sp[:, :, 0] * w
        im = sp[:, :, 1] * w
        im[:, 0] = 0.0  # ignored by the contract
        if n % 2 == 0:
            im[:, n // 2] = 0.0
        return np.einsum("bk,kt->bt", re, c) - np.einsum("bk,kt->bt", im, s)

    def irfft(self, spec, batch, n):
        return {"out": (self._irfft(spec, batch, n) / n).ravel()}

    def irfft_unnormalized(self, spec, batch, n):
        return {"out": self._irfft(spec, batch, n).ravel()}

    # 3.10
    @staticmethod
    def _scan(A, B, X, h0, seq_len, state, var):
        h = h0.copy()
        out = np.empty((seq_len, state))
        for t in range(seq_len):
            a = A[t * state:(t + 1) * state] if var else A
            b = B[t * state:(t + 1) * state] if var else B
            h = a * h + b * X[t * state:(t + 1) * state]
            out[t] = h
        return out

    def scan_diag(self, A, B, X, h0, seq_len, state):
        return {"out": self._scan(A, B, X, h0, seq_len, state, False).ravel()}

    def scan_diag_var(self, A, B, X, h0, seq_len, state):
        return {"out": self._scan(A, B, X, h0, seq_len, state, True).ravel()}

    def scan_diag_backward(self, A, B, X, h0, out, dy, seq_len, state):
        if seq_len == 0 or state == 0:
            z = np.zeros(state)
            return {"dA": z, "dB": z, "dX": np.zeros(0), "dh0": z}
        h = out.reshape(seq_len, state)
        x = X.reshape(seq_len, state)
        d = dy.reshape(seq_len, state)
        g = np.zeros((seq_len + 1, state))
        for t in range(seq_len - 1, -1, -1):
            g[t] = d[t] + A * g[t + 1]
        dA = np.zeros(state)
        dB = np.zeros(state)
        for t in range(seq_len - 1, -1, -1):
            hp = h[t - 1] if t > 0 else h0
            dA = dA + g[t] * hp
            dB = dB + g[t] * x[t]
        return {"dA": dA, "dB": dB, "dX": (g[:seq_len] * B).ravel(), "dh0": A * g[0]}

    def scan_diag_var_backward(self, A, B, X, h0, out, dy, seq_len, state):
        if seq_len == 0 or state == 0:
            return {"dA": np.zeros(0), "dB": np.zeros(0), "dX": np.zeros(0),
                    "dh0": np.zeros(state)}
        a = A.reshape(seq_len, state)
        b = B.reshape(seq_len, state)
        h = out.reshape(seq_len, state)
        x = X.reshape(seq_len, state)
        d = dy.reshape(seq_len, state)
        g = np.zeros((seq_len, state))
        for t in range(seq_len - 1, -1, -1):
            g[t] = d[t] + (a[t + 1] * g[t + 1] if t + 1 < seq_len else 0.0)
        hp = np.vstack([h0[None, :], h[:-1]])
        return {"dA": (g * hp).ravel(), "dB": (g * x).ravel(), "dX": (g * b).ravel(),
                "dh0": a[0] * g[0]}

    # 3.11
    def rows_gather(self, mat, rows, cols, indices, k):
        out = np.zeros(k * cols)
        for r, i in enumerate(indices[:k]):
            if i < rows:
                out[r * cols:(r + 1) * cols] = mat[i * cols:(i + 1) * cols]
        return {"out": out}

    def rows_scatter_add(self, mat, values, rows, cols, indices, k):
        out = mat.copy()
        for r, i in enumerate(indices[:k]):
            if i < rows:
                out[i * cols:(i + 1) * cols] = out[i * cols:(i + 1) * cols] + \
                    values[r * cols:(r + 1) * cols]
        return {"out": out}


def split_scale(scale, A, B):
    """Splits scale = sa * sb with sa an exact power of two chosen so that
    both scaled operands have about the same largest magnitude, so the float64
    reference neither overflows nor underflows where the true product is
    representable (contract §3.8)."""
    fa = np.abs(A[np.isfinite(A)])
    fb = np.abs(B[np.isfinite(B)])
    ma = float(fa.max()) if fa.size and fa.max() > 0 else 1.0
    mb = float(fb.max()) if fb.size and fb.max() > 0 else 1.0
    ka = int(round((math.log2(mb) + math.log2(scale) - math.log2(ma)) / 2))
    sa = math.ldexp(1.0, ka)
    return sa, scale / sa


# ---- torch reference (ATen compositions) ----------------------------------------------------


class TorchRef:
    """The primitives the way an ATen-backed implementation would compute
    them, in float64 on CPU torch. Where ATen differs from the contract on
    purpose the result is patched to the contract (see each case's note)."""

    name = "torch"

    def __init__(self):
        import torch  # noqa: the GPU machine has it; this machine does not
        import torch.nn.functional as Fn

        self.torch = torch
        self.Fn = Fn
        torch.set_num_threads(1)  # one summation order, run to run

    def T(self, a, shape=None):
        t = self.torch.from_numpy(np.ascontiguousarray(np.asarray(a, dtype=np.float64)).copy())
        return t.reshape(shape) if shape is not None else t

    @staticmethod
    def N(t):
        return t.detach().cpu().contiguous().numpy().astype(np.float64).ravel()

    def _mul0(self, a, b):
        torch = self.torch
        zero = ((a == 0) & torch.isinf(b)) | ((b == 0) & torch.isinf(a))
        return torch.where(zero, torch.zeros_like(a), a * b)

    def softmax(self, x, dims, axis):
        if x.size == 0:
            return {"out": x.copy()}
        return {"out": self.N(self.torch.softmax(self.T(x, dims), dim=axis))}

    def xent_weighted_mean(self, logits, weights, rows, cols):
        torch = self.torch
        if rows == 0 or cols == 0:
            return {"out": np.zeros(1)}
        x = self.T(logits, (rows, cols))
        w = self.T(weights, (rows, cols))
        nlp = -torch.log_softmax(x, dim=1)  # lse - x
        # The contract's lse (m + log sum exp(x - m)); torch.logsumexp returns
        # +-inf for rows holding infinities where the contract's formula is NaN.
        m = x.amax(dim=1, keepdim=True)
        lse = (m + torch.log(torch.exp(x - m).sum(dim=1, keepdim=True))).expand(rows, cols)
        terms = torch.where(torch.isfinite(nlp), w * nlp,
                            self._mul0(w, lse) - self._mul0(w, x))
        return {"out": np.array([float(terms.sum()) / max(rows, 1)])}

    def xent_teacher(self, student, teacher, rows, cols, gradient):
        torch = self.torch
        if rows == 0 or cols == 0:
            return {"out": np.zeros(0) if gradient else np.zeros(1)}
        S = self.T(student, (rows, cols)).requires_grad_(gradient == 1)
        p = torch.softmax(self.T(teacher, (rows, cols)), dim=1)
        logp = torch.log_softmax(S, dim=1)
        if gradient:
            loss = self.Fn.cross_entropy(S, p, reduction="sum") / max(rows, 1)
            (g,) = torch.autograd.grad(loss, S)
            return {"out": self.N(g)}
        # -p * log_softmax with 0 * inf = 0: a zero teacher probability on a
        # -inf student logit contributes 0 (cross_entropy would give NaN).
        terms = -self._mul0(p, logp.detach())
        return {"out": np.array([float(terms.sum()) / max(rows, 1)])}

    def conv(self, input, kernel, input_dims, kernel_dims, spatial_rank, stride, pad_before,
             pad_after, dilation, groups, bias=None):
        torch = self.torch
        r = spatial_rank
        ch = len(input_dims) - r - 1
        N = prod(input_dims[:ch])
        C = input_dims[ch]
        sp = input_dims[ch + 1:]
        Cout = kernel_dims[0]
        ks = kernel_dims[2:]
        outs = []
        for a in range(r):
            padded = sp[a] + pad_before[a] + pad_after[a]
            eff = (ks[a] - 1) * dilation[a] + 1
            outs.append(0 if padded < eff else (padded - eff) // stride[a] + 1)
        if N * Cout * prod(outs) == 0:  # ATen rejects a kernel larger than the input
            return {"out": np.zeros(0)}
        x = self.T(input, [N, C] + list(sp))
        w = self.T(kernel, kernel_dims)
        iG, oG = C // groups, Cout // groups
        wg = torch.cat([w[g * oG:(g + 1) * oG, g * iG:(g + 1) * iG] for g in range(groups)], 0)
        pad = []
        for a in reversed(range(r)):
            pad += [pad_before[a], pad_after[a]]
        xp = self.Fn.pad(x, pad)
        fn = {1: self.Fn.conv1d, 2: self.Fn.conv2d, 3: self.Fn.conv3d}[r]
        b = self.T(bias) if bias is not None else None
        y = fn(xp, wg.contiguous(), bias=b, stride=tuple(stride), padding=0,
               dilation=tuple(dilation), groups=groups)
        return {"out": self.N(y)}

    def rows_sum(self, x, rows, cols):
        return {"out": self.N(self.T(x, (rows, cols)).sum(dim=1))}

    def rows_max(self, x, rows, cols):
        torch = self.torch
        if cols == 0 or rows == 0:  # torch.amax rejects an empty reduction
            return {"out": np.zeros(rows)}
        t = self.T(x, (rows, cols))
        t = torch.where(torch.isnan(t), torch.full_like(t, -INF), t)
        return {"out": self.N(t.amax(dim=1))}

    def rows_first_max_mask(self, x, rows, cols):
        torch = self.torch
        if rows * cols == 0:
            return {"out": np.zeros(0)}
        t = self.T(x, (rows, cols))
        idx = t.argmax(dim=1)
        # torch.argmax takes NaN as the maximum; the contract's scan never
        # replaces on NaN (NaN is not strictly greater), so NaN rows are
        # resolved by the literal scan.
        for r in torch.nonzero(torch.isnan(t).any(dim=1)).flatten().tolist():
            best = 0
            for i in range(1, cols):
                if bool(t[r, i] > t[r, best]):
                    best = i
            idx[r] = best
        return {"out": self.N(self.Fn.one_hot(idx, cols).to(torch.float64))}

    def rows_topk_mask(self, x, rows, cols, k):
        torch = self.torch
        # torch.topk leaves ties unspecified: the contract's compare-and-count.
        t = self.T(x, (rows, cols))
        xi = t[:, :, None]
        xj = t[:, None, :]
        gt = xj > xi
        lt = xj < xi
        ar = torch.arange(cols)
        j_before_i = ar[None, :] < ar[:, None]  # (i, j)
        beats = gt | (~gt & ~lt & j_before_i[None, :, :])
        return {"out": self.N((beats.sum(dim=2) < k).to(torch.float64))}

    def rows_masked_softmax(self, scores, mask, rows, cols):
        torch = self.torch
        if rows * cols == 0:
            return {"out": np.zeros(rows * cols)}
        s = self.T(scores, (rows, cols))
        allowed = self.T(mask, (rows, cols)) != 0
        y = s.masked_fill(~allowed, -INF).softmax(dim=1)
        # All-blocked rows are NaN after masked_fill + softmax (the contract:
        # zeros), and a NaN/+inf allowed score would make blocked entries NaN
        # (the contract: blocked entries are always +0).
        y = torch.where(allowed, y, torch.zeros_like(y))
        return {"out": self.N(y)}

    def vec_concat(self, a, b, n, m):
        return {"out": self.N(self.torch.cat([self.T(a), self.T(b)]))}

    def vec_slice(self, x, n, start, len):
        return {"out": self.N(self.T(x)[start:start + len])}

    def broadcast_col(self, vec, rows, cols):
        return {"out": self.N(self.T(vec, (rows, 1)).expand(rows, cols))}

    def broadcast_to(self, x, in_dims, out_dims, axis_map):
        order = [mp - 1 for mp in axis_map if mp]
        t = self.T(x, in_dims)
        if len(in_dims):
            t = t.permute(order)
        shape = [in_dims[mp - 1] if mp else 1 for mp in axis_map]
        return {"out": self.N(t.reshape(shape).expand(out_dims))}

    def broadcast_to_adjoint(self, dout, in_dims, out_dims, axis_map):
        d = self.T(dout, out_dims)
        summed = [j for j, mp in enumerate(axis_map)
                  if mp == 0 or (in_dims[mp - 1] == 1 and out_dims[j] != 1)]
        if summed:  # dim=[] would sum everything
            d = d.sum(dim=summed, keepdim=True)
        order = [mp - 1 for mp in axis_map if mp]
        d = d.reshape([in_dims[a] for a in order])
        if order:
            d = d.permute([int(i) for i in np.argsort(order)])
        return {"out": self.N(d)}

    def swap_adjacent(self, x, dims, depth):
        return {"out": self.N(self.T(x, dims).transpose(depth, depth + 1))}

    def sum_axis(self, x, dims, axis):
        if len(dims) == 0:
            return {"out": x.copy()}
        return {"out": self.N(self.T(x, dims).sum(dim=axis))}

    def layernorm_forward(self, x, gamma, beta, rows, cols, eps):
        if rows == 0:
            return {"out": np.zeros(0), "normalized": np.zeros(0), "inv_std": np.zeros(0)}
        t = self.T(x, (rows, cols))
        out, mean, rstd = self.torch.ops.aten.native_layer_norm(t, [cols], self.T(gamma),
                                                               self.T(beta), eps)
        mean = mean.reshape(rows, 1)
        rstd = rstd.reshape(rows, 1)
        return {"out": self.N(out), "normalized": self.N((t - mean) * rstd),
                "inv_std": self.N(rstd)}

    def layernorm_backward(self, dout, normalized, inv_std, gamma, rows, cols):
        torch = self.torch
        if rows == 0:
            return {"dx": np.zeros(0), "dgamma": np.zeros(cols), "dbeta": np.zeros(cols)}
        # ATen's kernel takes (input, mean, rstd); an input with mean 0 and
        # x_hat = input * rstd = normalized reproduces the saved values.
        rstd = self.T(inv_std, (rows, 1))
        inp = self.T(normalized, (rows, cols)) / rstd
        mean = torch.zeros(rows, 1, dtype=torch.float64)
        dx, dg, db = torch.ops.aten.native_layer_norm_backward(
            self.T(dout, (rows, cols)), inp, [cols], mean, rstd, self.T(gamma),
            torch.zeros(cols, dtype=torch.float64), [True, True, True])
        return {"dx": self.N(dx), "dgamma": self.N(dg), "dbeta": self.N(db)}

    def _ops(self, A, B, batch, m, n, p, trans_a, trans_b):
        a = self.T(A, (batch, n, m)).transpose(1, 2) if trans_a else self.T(A, (batch, m, n))
        b = self.T(B, (batch, p, n)).transpose(1, 2) if trans_b else self.T(B, (batch, n, p))
        return a, b

    def bmm(self, A, B, batch, m, n, p, trans_a, trans_b):
        if batch * m * p == 0:
            return {"out": np.zeros(0)}
        a, b = self._ops(A, B, batch, m, n, p, trans_a, trans_b)
        return {"out": self.N(self.torch.bmm(a, b))}

    def bmm_scaled(self, A, B, batch, m, n, p, trans_a, trans_b, scale):
        if batch * m * p == 0:
            return {"out": np.zeros(0)}
        a, b = self._ops(A, B, batch, m, n, p, trans_a, trans_b)
        sa, sb = split_scale(scale, A, B)
        return {"out": self.N(self.torch.bmm(a * sa, b * sb))}

    def rfft(self, x, batch, n):
        if batch == 0:
            return {"out": np.zeros(0)}
        X = self.torch.fft.rfft(self.T(x, (batch, n)), dim=1)
        return {"out": self.N(self.torch.view_as_real(X))}

    def _irfft(self, spec, batch, n, norm):
        if batch == 0:
            return np.zeros(0)
        s = self.T(spec, (batch, n // 2 + 1, 2)).clone()
        # The contract ignores these imaginary parts; c2r back ends differ on
        # whether they read them, so they are zeroed first.
        s[:, 0, 1] = 0.0
        if n % 2 == 0:
            s[:, n // 2, 1] = 0.0
        X = self.torch.view_as_complex(s.contiguous())
        return self.N(self.torch.fft.irfft(X, n=n, dim=1, norm=norm))

    def irfft(self, spec, batch, n):
        return {"out": self._irfft(spec, batch, n, "backward")}

    def irfft_unnormalized(self, spec, batch, n):
        return {"out": self._irfft(spec, batch, n, "forward")}

    def _scan_graph(self, A, B, X, h0, seq_len, state, var, grad):
        torch = self.torch
        a = self.T(A).requires_grad_(grad)
        b = self.T(B).requires_grad_(grad)
        x = self.T(X, (seq_len, state)).requires_grad_(grad)
        h = self.T(h0).requires_grad_(grad)
        leaves = (a, b, x, h)
        a2 = a.reshape(seq_len, state) if var else None
        b2 = b.reshape(seq_len, state) if var else None
        hs = []
        for t in range(seq_len):
            h = (a2[t] if var else a) * h + (b2[t] if var else b) * x[t]
            hs.append(h)
        y = torch.stack(hs) if hs else torch.zeros(0, state, dtype=torch.float64)
        return y, leaves

    def scan_diag(self, A, B, X, h0, seq_len, state):
        y, _ = self._scan_graph(A, B, X, h0, seq_len, state, False, False)
        return {"out": self.N(y)}

    def scan_diag_var(self, A, B, X, h0, seq_len, state):
        y, _ = self._scan_graph(A, B, X, h0, seq_len, state, True, False)
        return {"out": self.N(y)}

    def _scan_backward(self, A, B, X, h0, dy, seq_len, state, var):
        torch = self.torch
        if seq_len == 0 or state == 0:
            z = np.zeros(0) if var else np.zeros(state)
            return {"dA": z, "dB": z, "dX": np.zeros(0), "dh0": np.zeros(state)}
        # Autograd through the recurrence recomputes h from the inputs (the
        # primitive reads it from `out`, which the case holds as the forward
        # result).
        y, leaves = self._scan_graph(A, B, X, h0, seq_len, state, var, True)
        grads = torch.autograd.grad(y, leaves, grad_outputs=self.T(dy, (seq_len, state)),
                                    allow_unused=True)
        names = ("dA", "dB", "dX", "dh0")
        res = {}
        for name, g, leaf in zip(names, grads, leaves):
            res[name] = self.N(g) if g is not None else np.zeros(leaf.numel())
        return res

    def scan_diag_backward(self, A, B, X, h0, out, dy, seq_len, state):
        return self._scan_backward(A, B, X, h0, dy, seq_len, state, False)

    def scan_diag_var_backward(self, A, B, X, h0, out, dy, seq_len, state):
        return self._scan_backward(A, B, X, h0, dy, seq_len, state, True)

    def rows_gather(self, mat, rows, cols, indices, k):
        torch = self.torch
        if k * cols == 0 or rows == 0:
            return {"out": np.zeros(k * cols)}
        idx = torch.tensor(indices[:k], dtype=torch.int64)
        valid = idx < rows
        g = self.T(mat, (rows, cols)).index_select(0, torch.where(valid, idx, 0))
        # index_select rejects out-of-range rows; the contract gives +0 rows.
        return {"out": self.N(torch.where(valid[:, None], g, torch.zeros_like(g)))}

    def rows_scatter_add(self, mat, values, rows, cols, indices, k):
        torch = self.torch
        out = self.T(mat, (rows, cols)).clone()
        if k * cols == 0 or rows == 0:
            return {"out": self.N(out)}
        idx = torch.tensor(indices[:k], dtype=torch.int64)
        valid = idx < rows  # index_add_ rejects out-of-range rows: skipped
        out.index_add_(0, idx[valid], self.T(values, (k, cols))[valid])
        return {"out": self.N(out)}


# ---- tolerances: the natural magnitude of each result (contract section 4) ----------------------


def fabs(a):
    """|a| with non-finite entries as 0: scales measure the finite data."""
    a = np.asarray(a, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(a), np.abs(a), 0.0)


def fmax(a, floor=0.0):
    a = fabs(a)
    return max(float(a.max()) if a.size else 0.0, floor)


def spec_meta(prim, a, res, dtype):
    """[(label, kind, scale)] for every output, backend independent (numpy)."""
    ref = NumpyRef()
    if prim in ("softmax", "rows_masked_softmax"):
        return [("out", "red", 1.0)]
    if prim == "xent_weighted_mean":
        rows, cols = a["rows"], a["cols"]
        tot = 0.0
        if rows and cols:
            x = a["logits"].reshape(rows, cols)
            w = a["weights"].reshape(rows, cols)
            with np.errstate(all="ignore"):
                m = np.max(np.where(np.isfinite(x), x, -np.inf), axis=1, keepdims=True)
                m = np.where(np.isfinite(m), m, 0.0)
                lse = m + np.log(np.sum(np.exp(np.where(np.isfinite(x), x, -np.inf) - m), axis=1,
                                        keepdims=True))
            tot = float(np.sum(fabs(w) * (fabs(lse) + fabs(x))))
        return [("out", "red", tot / max(rows, 1))]
    if prim == "xent_teacher":
        rows, cols = a["rows"], a["cols"]
        if a["gradient"]:
            return [("out", "red", 2.0 / max(rows, 1))]
        tot = 0.0
        if rows and cols:
            S = a["student"].reshape(rows, cols)
            with np.errstate(all="ignore"):
                ms = np.max(np.where(np.isfinite(S), S, -np.inf), axis=1, keepdims=True)
                ms = np.where(np.isfinite(ms), ms, 0.0)
                tot = float(np.sum(fabs(S - ms))) + float(np.sum(fabs(np.log(
                    np.sum(np.exp(np.where(np.isfinite(S), S, -np.inf) - ms), axis=1)))))
        return [("out", "red", tot / max(rows, 1))]
    if prim == "conv":
        b = a.copy()
        b["input"] = fabs(a["input"])
        b["kernel"] = fabs(a["kernel"])
        if "bias" in a:
            b["bias"] = fabs(a["bias"])
        groups = a["groups"]
        nred = a["kernel_dims"][1] // groups * prod(a["kernel_dims"][2:])
        return [("out", "contract:%d" % nred, fmax(ref.conv(**b)["out"]))]
    if prim == "rows_sum":
        return [("out", "red", fmax(ref.rows_sum(fabs(a["x"]), a["rows"], a["cols"])["out"]))]
    if prim in ("rows_max", "rows_first_max_mask", "rows_topk_mask", "vec_concat", "vec_slice",
                "broadcast_col", "broadcast_to", "swap_adjacent", "rows_gather"):
        return [("out", "exact", 0.0)]
    if prim == "broadcast_to_adjoint":
        b = dict(a, dout=fabs(a["dout"]))
        return [("out", "red", fmax(ref.broadcast_to_adjoint(**b)["out"]))]
    if prim == "sum_axis":
        b = dict(a, x=fabs(a["x"]))
        return [("out", "red", fmax(ref.sum_axis(**b)["out"]))]
    if prim == "layernorm_forward":
        nrm = res["normalized"]
        cols = a["cols"]
        g = np.tile(fabs(a["gamma"]), a["rows"])
        bt = np.tile(fabs(a["beta"]), a["rows"])
        return [("out", "red", fmax(fabs(nrm) * g + bt)),
                ("normalized", "red", fmax(nrm)),
                ("inv_std", "red", fmax(res["inv_std"]))]
    if prim == "layernorm_backward":
        rows, cols = a["rows"], a["cols"]
        dy = fabs(a["dout"]).reshape(rows, cols)
        n = fabs(a["normalized"]).reshape(rows, cols)
        g = dy * fabs(a["gamma"])
        inv = fabs(a["inv_std"]).reshape(rows, 1)
        dxs = inv / cols * (cols * g + g.sum(axis=1, keepdims=True) +
                            n * (g * n).sum(axis=1, keepdims=True))
        return [("dx", "red", fmax(dxs)), ("dgamma", "red", fmax((dy * n).sum(axis=0))),
                ("dbeta", "red", fmax(dy.sum(axis=0)))]
    if prim in ("bmm", "bmm_scaled"):
        b = dict(a, A=fabs(a["A"]), B=fabs(a["B"]))
        kind = "contract:%d" % a["n"]
        if prim == "bmm":
            return [("out", kind, fmax(ref.bmm(**b)["out"]))]
        return [("out", kind, fmax(ref.bmm_scaled(**b)["out"])), ("range_loss", "exact", 0.0)]
    if prim == "rfft":
        n = a["n"]
        rowsum = fabs(a["x"]).reshape(a["batch"], n).sum(axis=1) if a["batch"] else np.zeros(0)
        return [("out", "contract:%d" % n, fmax(rowsum))]
    if prim in ("irfft", "irfft_unnormalized"):
        n, batch = a["n"], a["batch"]
        sp = fabs(a["spec"]).reshape(batch, n // 2 + 1, 2)
        w = np.full(n // 2 + 1, 2.0)
        w[0] = 1.0
        if n % 2 == 0:
            w[n // 2] = 1.0
        mag = ((sp[:, :, 0] + sp[:, :, 1]) * w).sum(axis=1) if batch else np.zeros(0)
        if prim == "irfft":
            mag = mag / n
        return [("out", "contract:%d" % n, fmax(mag))]
    if prim in ("scan_diag", "scan_diag_var"):
        var = prim == "scan_diag_var"
        H = NumpyRef._scan(fabs(a["A"]), fabs(a["B"]), fabs(a["X"]), fabs(a["h0"]),
                           a["seq_len"], a["state"], var)
        return [("out", "red", fmax(H))]
    if prim in ("scan_diag_backward", "scan_diag_var_backward"):
        var = prim == "scan_diag_var_backward"
        T, S = a["seq_len"], a["state"]
        if T == 0 or S == 0:
            return [(l, "red", 0.0) for l in ("dA", "dB", "dX", "dh0")]
        A = fabs(a["A"]).reshape(T, S) if var else np.tile(fabs(a["A"]), (T, 1))
        B = fabs(a["B"]).reshape(T, S) if var else np.tile(fabs(a["B"]), (T, 1))
        X = fabs(a["X"]).reshape(T, S)
        dy = fabs(a["dy"]).reshape(T, S)
        hp = np.vstack([fabs(a["h0"])[None, :], fabs(a["out"]).reshape(T, S)[:-1]])
        # G bounds |g|: g[t] = dy[t] + A[t+1]*g[t+1] (var) or A*g[t+1] (shared).
        G = np.zeros((T + 1, S))
        for t in range(T - 1, -1, -1):
            a_next = (A[t + 1] if t + 1 < T else 0.0) if var else A[0]
            G[t] = dy[t] + a_next * G[t + 1]
        G = G[:T]
        if var:
            dA, dB = G * hp, G * X
        else:
            dA, dB = (G * hp).sum(axis=0), (G * X).sum(axis=0)
        return [("dA", "red", fmax(dA)), ("dB", "red", fmax(dB)), ("dX", "red", fmax(G * B)),
                ("dh0", "red", fmax(A[0] * G[0]))]
    if prim == "rows_scatter_add":
        b = dict(a, mat=fabs(a["mat"]), values=fabs(a["values"]))
        return [("out", "elem", fmax(ref.rows_scatter_add(**b)["out"]))]
    raise KeyError(prim)


def range_loss(a, out, dtype):
    """contract §3.8's flag, from the inputs and the reference result in the dtype."""
    batch, m, p = a["batch"], a["m"], a["p"]
    if batch * m * p == 0:
        return 0
    tiny, big = (F32_TINY, F32_MAX) if dtype == "f32" else (F64_TINY, F64_MAX)
    A, B = a["A"], a["B"]
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B)) and np.all(np.isfinite(out))):
        return 1
    if np.any(np.abs(out) < tiny):
        return 1
    ma = float(np.max(np.abs(A))) if A.size else 0.0
    mb = float(np.max(np.abs(B))) if B.size else 0.0
    with np.errstate(over="ignore"):
        bound = float(np.float64(a["scale"]) * np.float64(a["n"]) * np.float64(ma) *
                      np.float64(mb))
    return 1 if bound > big else 0


# ---- text output ------------------------------------------------------------------------------


def fmt(dtype, v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if dtype == "f32":
        return str(np.float32(v))
    return repr(v)


def line_vals(kind, label, vals, dtype):
    vals = list(vals)
    if kind == "int":
        return "int %s %d%s" % (label, len(vals), "".join(" %d" % int(v) for v in vals))
    return "%s %s %d%s" % (kind, label, len(vals), "".join(" " + fmt(dtype, v) for v in vals))


def fmt_scale(s):
    return repr(float(s)) if math.isfinite(s) else "0.0"


def evaluate(case, dtype, backend):
    """The case's lines for one dtype."""
    a = materialize(case, dtype)
    lines = ["case %s %s %s" % (case.name, case.prim, dtype)]
    lines += ["note " + n for n in case.notes]
    for label, v in case.args.items():
        if v is None:
            continue
        val = a[label]
        kind = arg_kind(v)
        if kind == "int":
            lines.append(line_vals("int", label, val if isinstance(val, list) else [val], dtype))
        elif kind == "d":
            lines.append("d %s 1 %s" % (label, fmt("f64", val)))
        else:
            lines.append(line_vals("f", label, val, dtype))
    if case.status is not None:
        lines.append("status %d %s" % (case.status, case.needle or "-"))
        lines.append("end")
        return lines, None
    call = {k: v for k, v in a.items()}
    if case.prim in ("rows_gather", "rows_scatter_add"):
        call["indices"] = list(call["indices"])
    with np.errstate(all="ignore"):
        try:
            res = getattr(backend, case.prim)(**call)
        except Exception as exc:
            raise RuntimeError("%s backend failed on case %s (%s): %r" %
                               (backend.name, case.name, dtype, exc)) from exc
        res = {k: np.asarray(v, dtype=np.float64).ravel() for k, v in res.items()}
        meta_in = {k: v for k, v in a.items()}
        meta = spec_meta(case.prim, meta_in, res, dtype)
        if case.prim == "bmm_scaled":
            res["range_loss"] = np.array([float(range_loss(a, rnd(dtype, res["out"]), dtype))])
    for label, kind, scale in meta:
        vals = rnd(dtype, res[label])
        if label == "range_loss":
            vals = res[label]
        lines.append("tol %s %s" % (kind, fmt_scale(scale)))
        lines.append(line_vals("expect", label, vals, dtype))
        if case.prim == "rows_masked_softmax" or (case.prim == "rows_gather"):
            zeros = zero_positions(case.prim, a)
            if zeros:
                lines.append("zeros %s %d %s" % (label, len(zeros), " ".join(map(str, zeros))))
    lines.append("end")
    return lines, res


def zero_positions(prim, a):
    """Entries the contract fixes at exactly +0: blocked scores, and rows
    gathered from an out-of-range index."""
    if prim == "rows_masked_softmax":
        return [i for i, m in enumerate(a["mask"]) if m == 0]
    rows, cols = a["rows"], a["cols"]
    out = []
    for r, i in enumerate(a["indices"][:a["k"]]):
        if i >= rows:
            out += list(range(r * cols, (r + 1) * cols))
    return out


# ---- the cases ------------------------------------------------------------------------------


def cases_softmax():
    rng = np.random.default_rng(1001)
    cs = []
    cs.append(Case("softmax_spec_example", "softmax",
                   dict(x=F([0.10, -0.20, 0.30, 0.05, 0.25, -0.15]), dims=[2, 3], axis=1),
                   check={"out": [0.3375845, 0.2500888, 0.4123267, 0.3289329, 0.4017596,
                                  0.2693075]}))
    x = rng.standard_normal(60) * 3
    for axis in range(3):
        cs.append(Case("softmax_random_axis%d" % axis, "softmax",
                       dict(x=F(x), dims=[3, 4, 5], axis=axis)))
    cs.append(Case("softmax_rank1", "softmax", dict(x=F(rng.standard_normal(7)), dims=[7], axis=0)))
    cs.append(Case("softmax_rank4_unit_axis", "softmax",
                   dict(x=F(rng.standard_normal(12)), dims=[2, 1, 3, 2], axis=1)))
    cs.append(Case("softmax_rank4_axis2", "softmax",
                   dict(x=F(rng.standard_normal(36)), dims=[2, 3, 3, 2], axis=2)))
    cs.append(Case("softmax_long_rows", "softmax",
                   dict(x=F(rng.standard_normal(3 * 257) * 5), dims=[3, 257], axis=1)))
    edge = [[1.0, 2.0, NAN, 0.5],      # NaN: the whole fibre is NaN
            [1.0, INF, 2.0, 3.0],      # +inf: NaN
            [-INF, -INF, -INF, -INF],  # only -inf: NaN
            [-INF, 1.0, -INF, 2.0],    # some -inf: exact zeros there
            [1000.0, 999.0, 998.0, 1000.0],  # large values: the max shift
            [-1000.0, -1001.0, -1000.0, -1e4],
            [2.0, 2.0, 2.0, 2.0],      # ties
            [0.0, 30.0, -30.0, 80.0]]
    cs.append(Case("softmax_edges_rows", "softmax",
                   dict(x=F(np.array(edge).ravel()), dims=[8, 4], axis=1)))
    cs.append(Case("softmax_edges_columns", "softmax",
                   dict(x=F(np.array(edge).T.ravel()), dims=[4, 8], axis=0)))
    cs.append(Case("softmax_empty_middle", "softmax", dict(x=F([]), dims=[3, 0, 2], axis=1)))
    cs.append(Case("softmax_empty_other_axis", "softmax", dict(x=F([]), dims=[0, 4], axis=1)))
    cs.append(Case("softmax_reject_rank0", "softmax", dict(x=F([1.0]), dims=[], axis=0),
                   status=ST_INVALID, needle="rank"))
    cs.append(Case("softmax_reject_axis_high", "softmax",
                   dict(x=F(np.zeros(6)), dims=[2, 3], axis=2), status=ST_INVALID,
                   needle="axis"))
    cs.append(Case("softmax_reject_axis_negative", "softmax",
                   dict(x=F(np.zeros(6)), dims=[2, 3], axis=-1), status=ST_INVALID,
                   needle="axis"))
    cs.append(Case("softmax_reject_length", "softmax",
                   dict(x=F(np.zeros(5)), dims=[2, 3], axis=1), status=ST_INVALID, needle="x"))
    return cs


def cases_xent():
    rng = np.random.default_rng(1002)
    cs = []
    ex_x = [1, 2, 3, 0.5, -0.5, 0]
    cs.append(Case("xent_weighted_spec_example", "xent_weighted_mean",
                   dict(logits=F(ex_x), weights=F([0, 0, 1, 0.2, 0.3, 0.5]), rows=2, cols=3),
                   check={"out": [0.8189378]}))
    x = rng.standard_normal(35) * 2
    w = rng.uniform(0, 1, 35)
    cs.append(Case("xent_weighted_random", "xent_weighted_mean",
                   dict(logits=F(x), weights=F(w), rows=5, cols=7)))
    cs.append(Case("xent_weighted_signed_weights", "xent_weighted_mean",
                   dict(logits=F(rng.standard_normal(24)), weights=F(rng.standard_normal(24)),
                        rows=4, cols=6)))
    cs.append(Case("xent_weighted_large_logits", "xent_weighted_mean",
                   dict(logits=F(rng.standard_normal(12) * 50 + 1e4),
                        weights=F(rng.uniform(0, 1, 12)), rows=3, cols=4)))
    cs.append(Case("xent_weighted_long_row", "xent_weighted_mean",
                   dict(logits=F(rng.standard_normal(600)), weights=F(rng.uniform(0, 1, 600)),
                        rows=2, cols=300)))
    cs.append(Case("xent_weighted_minus_inf_logits", "xent_weighted_mean",
                   dict(logits=F([1.0, -INF, 2.0, 0.5, -INF, -1.0]),
                        weights=F([0.5, 0.0, 0.5, 0.2, 0.0, 0.8]), rows=2, cols=3),
                   note="a zero weight on a -inf logit contributes exactly 0 (contract §3.2; "
                        "ATen's w * -log_softmax gives 0 * inf = NaN)"))
    cs.append(Case("xent_weighted_minus_inf_weighted", "xent_weighted_mean",
                   dict(logits=F([1.0, -INF, 2.0]), weights=F([0.5, 0.25, 0.25]), rows=1,
                        cols=3)))
    cs.append(Case("xent_weighted_tiny_weight_huge_gap", "xent_weighted_mean",
                   dict(logits=F([1e308, -1e308, 0.0, 3.0]),
                        weights=F([0.5, 1e-10, 0.25, 0.25]), rows=2, cols=2),
                   dtypes=("f64",),
                   note="lse - x overflows: the term is recomputed as w*lse - w*x (contract §3.2)"))
    cs.append(Case("xent_weighted_nan", "xent_weighted_mean",
                   dict(logits=F([1.0, NAN, 2.0, 0.5, 1.5, -1.0]),
                        weights=F([0.5, 0.0, 0.5, 0.2, 0.3, 0.5]), rows=2, cols=3)))
    cs.append(Case("xent_weighted_plus_inf", "xent_weighted_mean",
                   dict(logits=F([1.0, INF, 2.0]), weights=F([0.5, 0.5, 0.0]), rows=1, cols=3)))
    cs.append(Case("xent_weighted_all_minus_inf_row", "xent_weighted_mean",
                   dict(logits=F([-INF, -INF, 1.0, 2.0]), weights=F([0.5, 0.5, 0.5, 0.5]),
                        rows=2, cols=2),
                   note="the contract's lse = m + log(sum exp(x - m)) is NaN for an all -inf row "
                        "(torch.logsumexp would give -inf)"))
    cs.append(Case("xent_weighted_rows0", "xent_weighted_mean",
                   dict(logits=F([]), weights=F([]), rows=0, cols=5)))
    cs.append(Case("xent_weighted_cols0", "xent_weighted_mean",
                   dict(logits=F([]), weights=F([]), rows=3, cols=0)))
    cs.append(Case("xent_weighted_reject_length", "xent_weighted_mean",
                   dict(logits=F(np.zeros(6)), weights=F(np.zeros(5)), rows=2, cols=3),
                   status=ST_INVALID, needle="weights"))

    S = [1, 2, 3, 0.5, -0.5, 0]
    Tt = [3, 2, 1, 0, 0, 0]
    cs.append(Case("xent_teacher_spec_example_loss", "xent_teacher",
                   dict(student=F(S), teacher=F(Tt), rows=2, cols=3, gradient=0),
                   check={"out": [1.5815430]}))
    cs.append(Case("xent_teacher_spec_example_grad", "xent_teacher",
                   dict(student=F(S), teacher=F(Tt), rows=2, cols=3, gradient=1),
                   check={"out": [-0.2876052, 0, 0.2876052, 0.0865735, -0.0735048,
                                  -0.0130687]}))
    s = rng.standard_normal(40) * 2
    t = rng.standard_normal(40) * 2
    for gflag in (0, 1):
        cs.append(Case("xent_teacher_random_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F(s), teacher=F(t), rows=5, cols=8, gradient=gflag)))
        cs.append(Case("xent_teacher_large_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F(rng.standard_normal(12) * 30 + 500),
                            teacher=F(rng.standard_normal(12) * 30 - 800), rows=3, cols=4,
                            gradient=gflag)))
        cs.append(Case("xent_teacher_long_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F(rng.standard_normal(520)),
                            teacher=F(rng.standard_normal(520)), rows=2, cols=260,
                            gradient=gflag)))
        cs.append(Case("xent_teacher_masked_teacher_%s" % ("grad" if gflag else "loss"),
                       "xent_teacher",
                       dict(student=F([0.5, 1.0, -1.0, 2.0, 0.0, 0.25]),
                            teacher=F([1.0, -INF, 0.0, -INF, 2.0, 1.0]), rows=2, cols=3,
                            gradient=gflag)))
        cs.append(Case("xent_teacher_masked_both_%s" % ("grad" if gflag else "loss"),
                       "xent_teacher",
                       dict(student=F([0.5, -INF, -1.0, 2.0, 0.0, -INF]),
                            teacher=F([1.0, -INF, 0.0, 0.5, 2.0, -INF]), rows=2, cols=3,
                            gradient=gflag),
                       note="a teacher probability of exactly 0 on a -inf student logit "
                            "contributes 0 (0 * inf = 0, as in contract §3.2's zero weight; "
                            "ATen's cross_entropy gives NaN)"))
        cs.append(Case("xent_teacher_minus_inf_student_%s" % ("grad" if gflag else "loss"),
                       "xent_teacher",
                       dict(student=F([0.5, -INF, -1.0]), teacher=F([1.0, 0.5, 0.0]), rows=1,
                            cols=3, gradient=gflag)))
        cs.append(Case("xent_teacher_nan_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F([0.5, 1.0, -1.0, 2.0, NAN, 0.25]),
                            teacher=F([1.0, 0.0, 0.0, 0.0, 2.0, 1.0]), rows=2, cols=3,
                            gradient=gflag)))
        cs.append(Case("xent_teacher_rows0_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F([]), teacher=F([]), rows=0, cols=4, gradient=gflag)))
        cs.append(Case("xent_teacher_cols0_%s" % ("grad" if gflag else "loss"), "xent_teacher",
                       dict(student=F([]), teacher=F([]), rows=3, cols=0, gradient=gflag)))
    cs.append(Case("xent_teacher_reject_gradient", "xent_teacher",
                   dict(student=F(np.zeros(6)), teacher=F(np.zeros(6)), rows=2, cols=3,
                        gradient=2), status=ST_INVALID, needle="gradient"))
    return cs


def conv_case(name, rng, input_dims, kernel_dims, stride, pb, pa, dil, groups, bias=True,
              **kw):
    x = rng.standard_normal(prod(input_dims))
    w = rng.standard_normal(prod(kernel_dims))
    args = dict(input=F(x), kernel=F(w))
    if bias:
        args["bias"] = F(rng.standard_normal(kernel_dims[0]))
    args.update(input_dims=list(input_dims), kernel_dims=list(kernel_dims),
                spatial_rank=len(stride), stride=list(stride), pad_before=list(pb),
                pad_after=list(pa), dilation=list(dil), groups=groups)
    return Case(name, "conv", args, **kw)


def cases_conv():
    rng = np.random.default_rng(1003)
    cs = []
    w_ex = np.zeros((2, 2, 2))
    w_ex[0, 0] = [1, -1]
    w_ex[0, 1] = [100, 100]
    w_ex[1, 0] = [7, 7]
    w_ex[1, 1] = [0.5, 2]
    cs.append(Case("conv_spec_example", "conv",
                   dict(input=F([1, 2, 3, 4, 10, 20, 30, 40]), kernel=F(w_ex),
                        bias=F([0, 1]), input_dims=[2, 4], kernel_dims=[2, 2, 2],
                        spatial_rank=1, stride=[1], pad_before=[1], pad_after=[0],
                        dilation=[2], groups=2),
                   check={"out": [-2, -2, -2, 41, 66, 91]}))
    cs.append(conv_case("conv1d_stride2_asym_pad", rng, [2, 3, 11], [4, 3, 3], [2], [2], [1],
                        [1], 1))
    cs.append(conv_case("conv1d_groups3_dil2_nobias", rng, [2, 6, 13], [9, 6, 3], [3], [0], [3],
                        [2], 3, bias=False))
    cs.append(conv_case("conv1d_depthwise", rng, [1, 4, 9], [4, 4, 5], [1], [2], [2], [1], 4))
    cs.append(conv_case("conv1d_two_batch_axes", rng, [2, 3, 2, 8], [3, 2, 3], [1], [1], [1],
                        [1], 1))
    cs.append(conv_case("conv1d_no_batch_axis", rng, [3, 9], [2, 3, 4], [2], [0], [0], [1], 1))
    cs.append(conv_case("conv1d_kernel_wider_than_input", rng, [1, 2, 3], [2, 2, 5], [1], [2],
                        [2], [1], 1))
    cs.append(conv_case("conv1d_long", rng, [1, 2, 200], [3, 2, 7], [3], [3], [1], [2], 1))
    cs.append(conv_case("conv2d_groups2_mixed", rng, [2, 4, 7, 6], [4, 4, 3, 2], [2, 1],
                        [1, 0], [0, 2], [1, 2], 2))
    cs.append(conv_case("conv2d_plain", rng, [1, 3, 5, 5], [2, 3, 3, 3], [1, 1], [1, 1], [1, 1],
                        [1, 1], 1))
    cs.append(conv_case("conv2d_stride_dil", rng, [2, 2, 9, 8], [6, 2, 2, 3], [3, 2], [0, 2],
                        [2, 0], [3, 1], 2))
    cs.append(conv_case("conv3d_groups2", rng, [1, 2, 5, 4, 6], [4, 2, 2, 3, 2], [1, 2, 1],
                        [1, 0, 1], [0, 1, 2], [2, 1, 1], 2))
    cs.append(conv_case("conv3d_no_batch", rng, [3, 4, 3, 5], [3, 3, 2, 1, 3], [1, 1, 2],
                        [0, 1, 0], [1, 0, 1], [1, 1, 1], 1))
    # Off-diagonal kernel blocks hold NaN: never read. One input entry is
    # NaN and one +inf: only the outputs that read them follow IEEE.
    x = rng.standard_normal(2 * 4 * 10)
    x[5] = NAN
    x[4 * 10 + 3 * 10 + 7] = INF
    w = rng.standard_normal((4, 4, 3))
    w[0:2, 2:4] = NAN
    w[2:4, 0:2] = NAN
    cs.append(Case("conv1d_nonfinite_and_unread_blocks", "conv",
                   dict(input=F(x), kernel=F(w), bias=F(rng.standard_normal(4)),
                        input_dims=[2, 4, 10], kernel_dims=[4, 4, 3], spatial_rank=1,
                        stride=[1], pad_before=[1], pad_after=[1], dilation=[1], groups=2),
                   note="NaN in the off-diagonal kernel blocks must not reach the result; the "
                        "input NaN/inf reach only the outputs whose window reads them"))
    cs.append(conv_case("conv1d_output_volume0", rng, [1, 2, 3], [2, 2, 3], [1], [0], [0], [2],
                        1, note="padded < eff: an empty result (ATen's conv rejects it)"))
    cs.append(conv_case("conv2d_batch0", rng, [0, 2, 4, 4], [2, 2, 2, 2], [1, 1], [0, 0],
                        [0, 0], [1, 1], 1))
    base = dict(input=F(np.zeros(2 * 4 * 6)), kernel=F(np.zeros(4 * 4 * 3)), bias=F(np.zeros(4)),
                input_dims=[2, 4, 6], kernel_dims=[4, 4, 3], spatial_rank=1, stride=[1],
                pad_before=[0], pad_after=[0], dilation=[1], groups=2)

    def rej(name, needle, **over):
        args = dict(base)
        args.update(over)
        cs.append(Case("conv_reject_" + name, "conv", args, status=ST_INVALID, needle=needle))

    rej("groups0", "groups", groups=0)
    rej("groups_not_dividing", "groups", groups=3)
    rej("kernel_cin", "kernel_dims", kernel=F(np.zeros(4 * 3 * 3)), kernel_dims=[4, 3, 3])
    rej("stride0", "stride", stride=[0])
    rej("dilation0", "dilation", dilation=[0])
    rej("negative_pad", "pad_before", pad_before=[-1])
    rej("kernel_extent0", "kernel_dims", kernel=F([]), kernel_dims=[4, 4, 0])
    rej("bias_length", "bias", bias=F(np.zeros(3)))
    rej("input_length", "input", input=F(np.zeros(47)))
    return cs


def ties_matrix(rng, rows, cols, levels=4):
    return rng.integers(0, levels, rows * cols).astype(np.float64)


def cases_rows():
    rng = np.random.default_rng(1004)
    cs = []
    edge = np.array([[1.0, NAN, 3.0, 2.0],
                     [NAN, NAN, NAN, NAN],
                     [-INF, -INF, -INF, -INF],
                     [NAN, -1.0, 5.0, 5.0],
                     [2.0, INF, 1.0, INF],
                     [-3.0, -1.0, -2.0, -1.0]]).ravel()
    # rows_sum
    cs.append(Case("rows_sum_random", "rows_sum",
                   dict(x=F(rng.standard_normal(54)), rows=6, cols=9)))
    cs.append(Case("rows_sum_long", "rows_sum",
                   dict(x=F(rng.standard_normal(1200)), rows=2, cols=600)))
    cs.append(Case("rows_sum_cancellation", "rows_sum",
                   dict(x=F([1e8, 1.0, -1e8, 0.5, 3.0, -3.0]), rows=2, cols=3)))
    cs.append(Case("rows_sum_nonfinite", "rows_sum",
                   dict(x=F([1.0, NAN, 2.0, INF, 1.0, 2.0, INF, -INF, 0.0, -INF, -1.0, 5.0]),
                        rows=4, cols=3)))
    cs.append(Case("rows_sum_cols0", "rows_sum", dict(x=F([]), rows=3, cols=0)))
    cs.append(Case("rows_sum_rows0", "rows_sum", dict(x=F([]), rows=0, cols=5)))
    cs.append(Case("rows_sum_reject_length", "rows_sum", dict(x=F(np.zeros(6)), rows=2, cols=4),
                   status=ST_INVALID, needle="x"))
    # rows_max
    cs.append(Case("rows_max_random", "rows_max",
                   dict(x=F(rng.standard_normal(54)), rows=6, cols=9)))
    cs.append(Case("rows_max_edges", "rows_max", dict(x=F(edge), rows=6, cols=4),
                   note="NaN is ignored (an all-NaN row gives -inf); ATen's amax propagates "
                        "NaN, so NaN is replaced by -inf first"))
    cs.append(Case("rows_max_long", "rows_max",
                   dict(x=F(rng.standard_normal(800)), rows=2, cols=400)))
    cs.append(Case("rows_max_cols0", "rows_max", dict(x=F([]), rows=3, cols=0),
                   note="cols == 0 gives zeros (compatibility convention; torch.amax rejects "
                        "an empty reduction)"))
    cs.append(Case("rows_max_rows0", "rows_max", dict(x=F([]), rows=0, cols=4)))
    # first-max mask
    cs.append(Case("rows_first_max_spec_example", "rows_first_max_mask",
                   dict(x=F([3, 1, 3, 2]), rows=1, cols=4), check={"out": [1, 0, 0, 0]}))
    cs.append(Case("rows_first_max_ties", "rows_first_max_mask",
                   dict(x=F(ties_matrix(rng, 8, 6)), rows=8, cols=6)))
    cs.append(Case("rows_first_max_random", "rows_first_max_mask",
                   dict(x=F(rng.standard_normal(70)), rows=7, cols=10)))
    cs.append(Case("rows_first_max_edges", "rows_first_max_mask",
                   dict(x=F(edge), rows=6, cols=4),
                   note="the scan replaces only on strictly greater: a NaN never wins and a "
                        "leading NaN keeps index 0 (torch.argmax takes NaN as the maximum)"))
    cs.append(Case("rows_first_max_rows0", "rows_first_max_mask", dict(x=F([]), rows=0, cols=4)))
    cs.append(Case("rows_first_max_cols0", "rows_first_max_mask", dict(x=F([]), rows=4, cols=0)))
    # top-k mask
    cs.append(Case("rows_topk_spec_k2", "rows_topk_mask",
                   dict(x=F([3, 1, 3, 2]), rows=1, cols=4, k=2), check={"out": [1, 0, 1, 0]}))
    cs.append(Case("rows_topk_spec_k3", "rows_topk_mask",
                   dict(x=F([3, 1, 3, 2]), rows=1, cols=4, k=3), check={"out": [1, 0, 1, 1]}))
    cs.append(Case("rows_topk_spec_nan", "rows_topk_mask",
                   dict(x=F([1, NAN, 2]), rows=1, cols=3, k=2), check={"out": [1, 1, 1]},
                   note="with NaN the literal compare-and-count rule holds and keeps more than "
                        "k"))
    tm = ties_matrix(rng, 6, 7)
    for k in (0, 1, 3, 6, 7, 9):
        cs.append(Case("rows_topk_ties_k%d" % k, "rows_topk_mask",
                       dict(x=F(tm), rows=6, cols=7, k=k),
                       note="ties go to the lower index (torch.topk leaves ties unspecified: "
                            "computed by the contract's compare-and-count)"))
    cs.append(Case("rows_topk_random_k4", "rows_topk_mask",
                   dict(x=F(rng.standard_normal(5 * 40)), rows=5, cols=40, k=4)))
    cs.append(Case("rows_topk_edges_k2", "rows_topk_mask", dict(x=F(edge), rows=6, cols=4, k=2)))
    cs.append(Case("rows_topk_rows0", "rows_topk_mask", dict(x=F([]), rows=0, cols=4, k=2)))
    cs.append(Case("rows_topk_cols0", "rows_topk_mask", dict(x=F([]), rows=3, cols=0, k=2)))
    cs.append(Case("rows_topk_reject_k", "rows_topk_mask",
                   dict(x=F(np.zeros(6)), rows=2, cols=3, k=-1), status=ST_INVALID, needle="k"))
    # masked softmax
    cs.append(Case("rows_masked_softmax_spec_example", "rows_masked_softmax",
                   dict(scores=F([1000, -1000, 3, 4]), mask=F([0, 1, 0, 0]), rows=2, cols=2),
                   check={"out": [0, 1, 0, 0]},
                   note="an all-blocked row is zeros (ATen's masked_fill + softmax gives NaN)"))
    sc = rng.standard_normal(6 * 9) * 3
    mk = (rng.uniform(0, 1, 6 * 9) < 0.6).astype(np.float64)
    mk[9:18] = 0.0  # row 1 all blocked
    cs.append(Case("rows_masked_softmax_random", "rows_masked_softmax",
                   dict(scores=F(sc), mask=F(mk), rows=6, cols=9),
                   note="row 1 is all blocked: zeros (ATen's masked_fill + softmax gives NaN)"))
    cs.append(Case("rows_masked_softmax_blocked_nonfinite", "rows_masked_softmax",
                   dict(scores=F([NAN, 1.0, INF, 2.0, -INF, 0.5, 3.0, NAN, 1e30, -2.0, 1.0, 0.0]),
                        mask=F([0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 1, 1]), rows=3, cols=4),
                   note="blocked NaN/inf scores never influence the result"))
    cs.append(Case("rows_masked_softmax_allowed_nonfinite", "rows_masked_softmax",
                   dict(scores=F([INF, 1.0, 2.0, NAN, 0.5, 1.0, -INF, -INF, 3.0, -INF, 1.0, 2.0]),
                        mask=F([1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0]), rows=4, cols=3),
                   note="an allowed NaN/+inf, or only -inf allowed, makes the allowed entries "
                        "NaN; blocked entries stay +0 (ATen's softmax would make them NaN)"))
    cs.append(Case("rows_masked_softmax_mask_values", "rows_masked_softmax",
                   dict(scores=F([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                        mask=F([-1.0, 0.5, NAN, 0.0, -0.0, 2.0]), rows=2, cols=3),
                   note="allowed <=> mask != 0: negative and NaN mask values allow, -0 blocks"))
    cs.append(Case("rows_masked_softmax_large", "rows_masked_softmax",
                   dict(scores=F(rng.standard_normal(2 * 300) * 10 + 500),
                        mask=F((rng.uniform(0, 1, 600) < 0.5).astype(np.float64)), rows=2,
                        cols=300)))
    cs.append(Case("rows_masked_softmax_rows0", "rows_masked_softmax",
                   dict(scores=F([]), mask=F([]), rows=0, cols=3)))
    cs.append(Case("rows_masked_softmax_cols0", "rows_masked_softmax",
                   dict(scores=F([]), mask=F([]), rows=3, cols=0)))
    cs.append(Case("rows_masked_softmax_reject_mask_length", "rows_masked_softmax",
                   dict(scores=F(np.zeros(6)), mask=F(np.zeros(5)), rows=2, cols=3),
                   status=ST_INVALID, needle="mask"))
    return cs


def cases_vec():
    rng = np.random.default_rng(1005)
    cs = []
    a = rng.standard_normal(7)
    a[2] = NAN
    b = rng.standard_normal(5)
    b[0] = -INF
    cs.append(Case("vec_concat_random", "vec_concat", dict(a=F(a), b=F(b), n=7, m=5)))
    cs.append(Case("vec_concat_a_empty", "vec_concat", dict(a=F([]), b=F(b), n=0, m=5)))
    cs.append(Case("vec_concat_b_empty", "vec_concat", dict(a=F(a), b=F([]), n=7, m=0)))
    cs.append(Case("vec_concat_both_empty", "vec_concat", dict(a=F([]), b=F([]), n=0, m=0)))
    cs.append(Case("vec_concat_signed_zero", "vec_concat",
                   dict(a=F([-0.0, 0.0]), b=F([1e-300, -1e-45]), n=2, m=2)))
    cs.append(Case("vec_concat_reject_length", "vec_concat",
                   dict(a=F(a), b=F(b), n=6, m=5), status=ST_INVALID, needle="a"))
    x = rng.standard_normal(11)
    x[4] = INF
    cs.append(Case("vec_slice_middle", "vec_slice", dict(x=F(x), n=11, start=3, len=5)))
    cs.append(Case("vec_slice_full", "vec_slice", dict(x=F(x), n=11, start=0, len=11)))
    cs.append(Case("vec_slice_empty_at_end", "vec_slice", dict(x=F(x), n=11, start=11, len=0)))
    cs.append(Case("vec_slice_empty_source", "vec_slice", dict(x=F([]), n=0, start=0, len=0)))
    cs.append(Case("vec_slice_reject_past_end", "vec_slice", dict(x=F(x), n=11, start=8, len=4),
                   status=ST_INVALID, needle="len"))
    cs.append(Case("vec_slice_reject_overflow", "vec_slice",
                   dict(x=F(x), n=11, start=2, len=(1 << 63) - 1), status=ST_INVALID,
                   needle="len"))
    cs.append(Case("vec_slice_reject_negative_start", "vec_slice",
                   dict(x=F(x), n=11, start=-1, len=2), status=ST_INVALID, needle="start"))
    v = rng.standard_normal(5)
    v[1] = NAN
    cs.append(Case("broadcast_col_random", "broadcast_col", dict(vec=F(v), rows=5, cols=4)))
    cs.append(Case("broadcast_col_cols0", "broadcast_col", dict(vec=F(v), rows=5, cols=0)))
    cs.append(Case("broadcast_col_rows0", "broadcast_col", dict(vec=F([]), rows=0, cols=3)))
    cs.append(Case("broadcast_col_reject_length", "broadcast_col",
                   dict(vec=F(v), rows=4, cols=3), status=ST_INVALID, needle="vec"))
    return cs


def cases_layout():
    rng = np.random.default_rng(1006)
    cs = []
    geoms = [
        ("spec_example", [2, 1, 3, 2], [2, 4, 3, 2], [1, 2, 3, 4]),
        ("insert_leading", [3, 2], [4, 3, 2], [0, 1, 2]),
        ("insert_middle_and_stretch", [3, 1], [3, 2, 5], [1, 0, 2]),
        ("permuted", [2, 3], [3, 2], [2, 1]),
        ("permuted_stretch", [1, 4, 3], [3, 5, 4], [3, 1, 2]),
        ("rank0_input", [], [3, 2], [0, 0]),
        ("identity", [2, 3], [2, 3], [1, 2]),
        ("stretch_to_zero", [2, 1], [2, 0], [1, 2]),
        ("zero_input_axis", [0, 3], [4, 0, 3], [0, 1, 2]),
    ]
    for name, ind, outd, amap in geoms:
        x = np.arange(prod(ind), dtype=np.float64) if name == "spec_example" else \
            rng.standard_normal(prod(ind))
        chk = {}
        if name == "spec_example":
            chk = {"out": list(np.tile(np.arange(6), 4)) + list(np.tile(np.arange(6, 12), 4))}
        cs.append(Case("broadcast_to_" + name, "broadcast_to",
                       dict(x=F(x), in_dims=ind, out_dims=outd, axis_map=amap), check=chk))
        dout = np.ones(prod(outd)) if name == "spec_example" else rng.standard_normal(prod(outd))
        chk = {"out": [4.0] * 12} if name == "spec_example" else {}
        cs.append(Case("broadcast_to_adjoint_" + name, "broadcast_to_adjoint",
                       dict(dout=F(dout), in_dims=ind, out_dims=outd, axis_map=amap), check=chk))
    x6 = np.zeros(6)
    for prim in ("broadcast_to", "broadcast_to_adjoint"):
        lab = "x" if prim == "broadcast_to" else "dout"
        bad = [("axis_twice", [2, 3], [2, 3], [1, 1], "axis_map"),
               ("axis_unused", [2, 3], [2, 3, 1], [1, 0, 0], "axis_map"),
               ("entry_above_rank", [2, 3], [2, 3], [1, 3], "axis_map"),
               ("dim_mismatch", [2, 3], [2, 4], [1, 2], "in_dims")]
        for name, ind, outd, amap, needle in bad:
            n = prod(ind) if prim == "broadcast_to" else prod(outd)
            cs.append(Case("%s_reject_%s" % (prim, name), prim,
                           {lab: F(x6[:n] if n <= 6 else np.zeros(n)), "in_dims": ind,
                            "out_dims": outd, "axis_map": amap},
                           status=ST_INVALID, needle=needle))
    cs.append(Case("swap_adjacent_spec_example", "swap_adjacent",
                   dict(x=F(np.arange(24)), dims=[2, 3, 4], depth=1),
                   check={"out": [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17, 21,
                                  14, 18, 22, 15, 19, 23]}))
    x = rng.standard_normal(120)
    x[7] = NAN
    x[50] = -0.0
    for depth in range(3):
        cs.append(Case("swap_adjacent_rank4_depth%d" % depth, "swap_adjacent",
                       dict(x=F(x), dims=[2, 3, 4, 5], depth=depth)))
    cs.append(Case("swap_adjacent_unit_axes", "swap_adjacent",
                   dict(x=F(rng.standard_normal(6)), dims=[1, 6, 1], depth=1)))
    cs.append(Case("swap_adjacent_empty", "swap_adjacent", dict(x=F([]), dims=[3, 0, 2], depth=0)))
    cs.append(Case("swap_adjacent_reject_depth", "swap_adjacent",
                   dict(x=F(np.zeros(6)), dims=[2, 3], depth=1), status=ST_INVALID,
                   needle="depth"))
    cs.append(Case("sum_axis_spec_example", "sum_axis",
                   dict(x=F(np.arange(24)), dims=[2, 3, 4], axis=2),
                   check={"out": [6, 22, 38, 54, 70, 86]}))
    x = rng.standard_normal(60)
    for axis in range(3):
        cs.append(Case("sum_axis_random_axis%d" % axis, "sum_axis",
                       dict(x=F(x), dims=[3, 4, 5], axis=axis)))
    cs.append(Case("sum_axis_long", "sum_axis",
                   dict(x=F(rng.standard_normal(1200)), dims=[2, 600], axis=1)))
    cs.append(Case("sum_axis_nonfinite", "sum_axis",
                   dict(x=F([1.0, NAN, INF, 2.0, 3.0, -INF, 1.0, INF, 0.0, 1.0, 2.0, 3.0]),
                        dims=[3, 4], axis=0)))
    cs.append(Case("sum_axis_rank0_copy", "sum_axis", dict(x=F([-2.5]), dims=[], axis=0)))
    cs.append(Case("sum_axis_zero_extent_axis", "sum_axis", dict(x=F([]), dims=[3, 0, 2], axis=1)))
    cs.append(Case("sum_axis_zero_other_axis", "sum_axis", dict(x=F([]), dims=[3, 0, 2], axis=0)))
    cs.append(Case("sum_axis_reject_axis", "sum_axis",
                   dict(x=F(np.zeros(6)), dims=[2, 3], axis=2), status=ST_INVALID, needle="axis"))
    return cs


def ln_forward(a):
    return NumpyRef().layernorm_forward(a["_x"], a["_gamma"], a["_beta"], a["rows"], a["cols"],
                                        a["_eps"])


def cases_layernorm():
    rng = np.random.default_rng(1007)
    cs = []
    ex_x = [0.1, 0.2, 0, -0.1, -0.3, 0.5, 0.2, 0.1]
    ex_g = [1, 0.9, 1.1, 1]
    ex_b = [0, 0.1, -0.1, 0]
    cs.append(Case("layernorm_forward_spec_example", "layernorm_forward",
                   dict(x=F(ex_x), gamma=F(ex_g), beta=F(ex_b), rows=2, cols=4, eps=D(1e-5)),
                   check={"out": [0.447035, 1.306994, -0.591738, -1.341104, -1.485206, 1.279428,
                                  0.188305, -0.087365],
                          "inv_std": [8.940696, 3.494603]}))
    fw = [
        ("random", 5, 16, 1.0, 0.0, 1e-5),
        ("large_offset", 4, 32, 1.0, 1000.0, 1e-5),
        ("long_rows", 2, 300, 2.0, 0.5, 1e-6),
        ("eps0", 3, 8, 1.0, 0.0, 0.0),
        ("big_eps", 3, 8, 0.1, 0.0, 0.5),
    ]
    for name, rows, cols, sd, off, eps in fw:
        cs.append(Case("layernorm_forward_" + name, "layernorm_forward",
                       dict(x=F(rng.standard_normal(rows * cols) * sd + off),
                            gamma=F(rng.standard_normal(cols)), beta=F(rng.standard_normal(cols)),
                            rows=rows, cols=cols, eps=D(eps))))
    cs.append(Case("layernorm_forward_cols1", "layernorm_forward",
                   dict(x=F([3.0, -2.0, 0.5]), gamma=F([2.0]), beta=F([0.25]), rows=3, cols=1,
                        eps=D(1e-5))))
    cs.append(Case("layernorm_forward_constant_rows", "layernorm_forward",
                   dict(x=F([7.0] * 4 + [-1.5] * 4), gamma=F([1, 2, 3, 4]),
                        beta=F([0.5, 0, -0.5, 1]), rows=2, cols=4, eps=D(1e-3))))
    cs.append(Case("layernorm_forward_nan_row", "layernorm_forward",
                   dict(x=F([1.0, NAN, 2.0, 3.0, 1.0, 2.0, 3.0, 5.0]), gamma=F([1, 1, 1, 1]),
                        beta=F([0, 0, 0, 0]), rows=2, cols=4, eps=D(1e-5))))
    cs.append(Case("layernorm_forward_rows0", "layernorm_forward",
                   dict(x=F([]), gamma=F(np.ones(4)), beta=F(np.zeros(4)), rows=0, cols=4,
                        eps=D(1e-5))))
    g4, b4, x8 = F(np.ones(4)), F(np.zeros(4)), F(np.zeros(8))
    for name, args, needle in [
            ("cols0", dict(x=F([]), gamma=F([]), beta=F([]), rows=2, cols=0, eps=D(1e-5)), "cols"),
            ("eps_negative", dict(x=x8, gamma=g4, beta=b4, rows=2, cols=4, eps=D(-1e-5)), "eps"),
            ("eps_nan", dict(x=x8, gamma=g4, beta=b4, rows=2, cols=4, eps=D(NAN)), "eps"),
            ("eps_inf", dict(x=x8, gamma=g4, beta=b4, rows=2, cols=4, eps=D(INF)), "eps"),
            ("gamma_length", dict(x=x8, gamma=F(np.ones(3)), beta=b4, rows=2, cols=4,
                                  eps=D(1e-5)), "gamma")]:
        cs.append(Case("layernorm_forward_reject_" + name, "layernorm_forward", args,
                       status=ST_INVALID, needle=needle))

    # Backward: the saved values come from a forward pass of x (in the dtype).
    def bw_case(name, x, gamma, beta, rows, cols, eps, dout, check=None):
        hidden = dict(_x=F(x), _gamma=F(gamma), _beta=F(beta), _eps=D(eps))
        args = dict(dout=F(dout),
                    normalized=Derived(lambda a: ln_forward(a)["normalized"]),
                    inv_std=Derived(lambda a: ln_forward(a)["inv_std"]),
                    gamma=F(gamma), rows=rows, cols=cols)
        return Case("layernorm_backward_" + name, "layernorm_backward", args, check=check,
                    hidden=hidden)

    cs.append(bw_case("spec_example", ex_x, ex_g, ex_b, 2, 4, 1e-5, np.ones(8),
                      check={"dx": [0.178671, -0.358057, 0.715399, -0.536013, -0.136033,
                                    -0.229431, 0.373466, -0.008002],
                             "dgamma": [-1.038171, 2.651581, -0.184940, -1.428470],
                             "dbeta": [2, 2, 2, 2]}))
    for name, rows, cols, off in [("random", 5, 16, 0.0), ("large_offset", 3, 24, 100.0),
                                  ("long_rows", 2, 260, 0.0)]:
        cs.append(bw_case(name, rng.standard_normal(rows * cols) + off,
                          rng.standard_normal(cols), rng.standard_normal(cols), rows, cols, 1e-5,
                          rng.standard_normal(rows * cols)))
    cs.append(Case("layernorm_backward_rows0", "layernorm_backward",
                   dict(dout=F([]), normalized=F([]), inv_std=F([]), gamma=F(np.ones(3)), rows=0,
                        cols=3)))
    cs.append(Case("layernorm_backward_reject_cols0", "layernorm_backward",
                   dict(dout=F([]), normalized=F([]), inv_std=F([1.0, 1.0]), gamma=F([]),
                        rows=2, cols=0), status=ST_INVALID, needle="cols"))
    cs.append(Case("layernorm_backward_reject_inv_std_length", "layernorm_backward",
                   dict(dout=F(np.zeros(8)), normalized=F(np.zeros(8)), inv_std=F([1.0]),
                        gamma=F(np.ones(4)), rows=2, cols=4), status=ST_INVALID,
                   needle="inv_std"))
    return cs


def cases_bmm():
    rng = np.random.default_rng(1008)
    cs = []
    for ta in (0, 1):
        for tb in (0, 1):
            batch, m, n, p = 3, 4, 5, 6
            cs.append(Case("bmm_random_ta%d_tb%d" % (ta, tb), "bmm",
                           dict(A=F(rng.standard_normal(batch * m * n)),
                                B=F(rng.standard_normal(batch * n * p)), batch=batch, m=m, n=n,
                                p=p, trans_a=ta, trans_b=tb)))
    cs.append(Case("bmm_long_contraction", "bmm",
                   dict(A=F(rng.standard_normal(2 * 257)), B=F(rng.standard_normal(257 * 3)),
                        batch=1, m=2, n=257, p=3, trans_a=0, trans_b=1)))
    cs.append(Case("bmm_1x1", "bmm",
                   dict(A=F([3.0]), B=F([-0.5]), batch=1, m=1, n=1, p=1, trans_a=0, trans_b=0)))
    A = rng.standard_normal(2 * 2 * 3)
    B = rng.standard_normal(2 * 3 * 2)
    A[1] = NAN
    B[6 + 2] = INF
    cs.append(Case("bmm_nonfinite", "bmm",
                   dict(A=F(A), B=F(B), batch=2, m=2, n=3, p=2, trans_a=0, trans_b=0)))
    cs.append(Case("bmm_n0_zeros", "bmm",
                   dict(A=F([]), B=F([]), batch=2, m=3, n=0, p=2, trans_a=0, trans_b=0)))
    for name, (b_, m_, p_) in (("batch0", (0, 3, 2)), ("m0", (2, 0, 2)), ("p0", (2, 3, 0))):
        cs.append(Case("bmm_" + name, "bmm",
                       dict(A=F(np.zeros(b_ * m_ * 4)), B=F(np.zeros(b_ * 4 * p_)), batch=b_,
                            m=m_, n=4, p=p_, trans_a=1, trans_b=0)))
    cs.append(Case("bmm_reject_trans", "bmm",
                   dict(A=F(np.zeros(4)), B=F(np.zeros(4)), batch=1, m=2, n=2, p=2, trans_a=2,
                        trans_b=0), status=ST_INVALID, needle="trans_a"))
    cs.append(Case("bmm_reject_length", "bmm",
                   dict(A=F(np.zeros(5)), B=F(np.zeros(4)), batch=1, m=2, n=2, p=2, trans_a=0,
                        trans_b=0), status=ST_INVALID, needle="A"))
    # Scaled products.
    cs.append(Case("bmm_scaled_spec_example", "bmm_scaled",
                   dict(A=F([1e30]), B=F([1e30]), batch=1, m=1, n=1, p=1, trans_a=0, trans_b=0,
                        scale=D(1e-30)), check={"out": [1e30], "range_loss": [0]}))
    cs.append(Case("bmm_scaled_tiny_operands", "bmm_scaled",
                   dict(A=F([1e-30, 2e-30]), B=F([1e-30, -3e-30]), batch=1, m=1, n=2, p=1,
                        trans_a=0, trans_b=0, scale=D(1e30)), dtypes=("f32",)))
    cs.append(Case("bmm_scaled_f64_extremes", "bmm_scaled",
                   dict(A=F([1e200, 2e200, -1e200, 0.5e200]), B=F([3e200, -1e200]),
                        batch=1, m=2, n=2, p=1, trans_a=0, trans_b=1, scale=D(1e-300)),
                   dtypes=("f64",)))
    for ta in (0, 1):
        for tb in (0, 1):
            cs.append(Case("bmm_scaled_random_ta%d_tb%d" % (ta, tb), "bmm_scaled",
                           dict(A=F(rng.standard_normal(2 * 3 * 4)),
                                B=F(rng.standard_normal(2 * 4 * 5)), batch=2, m=3, n=4, p=5,
                                trans_a=ta, trans_b=tb, scale=D(0.125 if ta else 3.7))))
    cs.append(Case("bmm_scaled_range_nonfinite_input", "bmm_scaled",
                   dict(A=F([1.0, INF, 2.0, 1.0]), B=F([1.0, 0.0]), batch=1, m=2, n=2,
                        p=1, trans_a=0, trans_b=0, scale=D(1.0))))
    cs.append(Case("bmm_scaled_range_exact_zero", "bmm_scaled",
                   dict(A=F([1.0, -1.0]), B=F([2.0, 2.0]), batch=1, m=1, n=2, p=1, trans_a=0,
                        trans_b=0, scale=D(1.0)),
                   note="an exact zero result is below the smallest normal: range_loss = 1"))
    cs.append(Case("bmm_scaled_range_subnormal_result", "bmm_scaled",
                   dict(A=F([1e-20]), B=F([1e-20]), batch=1, m=1, n=1, p=1, trans_a=0,
                        trans_b=0, scale=D(1e-10)), dtypes=("f32",)))
    cs.append(Case("bmm_scaled_range_bound", "bmm_scaled",
                   dict(A=F([1e19, 0.0, 0.0, 1.0]), B=F([1.0, 1e20]), batch=1, m=2, n=2, p=1,
                        trans_a=0, trans_b=0, scale=D(1.0)), dtypes=("f32",),
                   note="every product and result is representable, but the bound "
                        "scale*n*max|A|*max|B| = 2e39 overflows: range_loss = 1"))
    cs.append(Case("bmm_scaled_range_bound_overflow_f64", "bmm_scaled",
                   dict(A=F([1e160, 0.0, 0.0, 1.0]), B=F([1.0, 1e160]), batch=1, m=2, n=2, p=1,
                        trans_a=0, trans_b=0, scale=D(1.0)), dtypes=("f64",),
                   note="the bound scale*n*max|A|*max|B| overflows: range_loss = 1"))
    cs.append(Case("bmm_scaled_range_bound_f64", "bmm_scaled",
                   dict(A=F([1e160, 1.0]), B=F([1e160, 1.0]), batch=1, m=1, n=2, p=1,
                        trans_a=0, trans_b=0, scale=D(1e-20)), dtypes=("f64",),
                   note="the bound scale*n*max|A|*max|B| = 2e300 stays finite: range_loss = 0"))
    cs.append(Case("bmm_scaled_n0", "bmm_scaled",
                   dict(A=F([]), B=F([]), batch=1, m=2, n=0, p=2, trans_a=0, trans_b=0,
                        scale=D(2.0)), note="n == 0 gives zeros, so range_loss = 1"))
    cs.append(Case("bmm_scaled_empty", "bmm_scaled",
                   dict(A=F([]), B=F(np.zeros(6)), batch=1, m=0, n=3, p=2, trans_a=0, trans_b=0,
                        scale=D(2.0)), note="an empty result sets range_loss = 0"))
    for name, sc in (("zero", 0.0), ("negative", -1.0), ("inf", INF), ("nan", NAN)):
        cs.append(Case("bmm_scaled_reject_scale_" + name, "bmm_scaled",
                       dict(A=F(np.ones(4)), B=F(np.ones(4)), batch=1, m=2, n=2, p=2, trans_a=0,
                            trans_b=0, scale=D(sc)), status=ST_INVALID, needle="scale"))
    return cs


def cases_fft():
    rng = np.random.default_rng(1009)
    cs = []
    cs.append(Case("rfft_spec_example", "rfft", dict(x=F([1, 0, 0, 0, 1, 2, 3, 4]), batch=2, n=4),
                   check={"out": [1, 0, 1, 0, 1, 0, 10, 0, -2, 2, -2, 0]}))
    cs.append(Case("irfft_spec_example", "irfft",
                   dict(spec=F([10, 0, -2, 2, -2, 0]), batch=1, n=4), check={"out": [1, 2, 3, 4]}))
    cs.append(Case("irfft_unnormalized_spec_example", "irfft_unnormalized",
                   dict(spec=F([10, 0, -2, 2, -2, 0]), batch=1, n=4),
                   check={"out": [4, 8, 12, 16]}))
    for n in (1, 2, 3, 5, 7, 8, 12, 13, 16, 17, 31, 64, 97):
        batch = 3 if n < 16 else 2
        cs.append(Case("rfft_n%d" % n, "rfft",
                       dict(x=F(rng.standard_normal(batch * n)), batch=batch, n=n)))
        # Random half spectra, imaginary parts of bin 0 (and bin n/2 for even
        # n) included: they must be ignored.
        spec = rng.standard_normal(batch * (n // 2 + 1) * 2)
        note = "the imaginary parts of bin 0 and, for even n, bin n/2 are ignored " \
               "(zeroed before torch.fft.irfft)"
        cs.append(Case("irfft_n%d" % n, "irfft", dict(spec=F(spec), batch=batch, n=n), note=note))
        cs.append(Case("irfft_unnormalized_n%d" % n, "irfft_unnormalized",
                       dict(spec=F(spec), batch=batch, n=n), note=note))
    cs.append(Case("rfft_large_offset", "rfft",
                   dict(x=F(rng.standard_normal(30) + 1e4), batch=2, n=15)))
    for prim in ("rfft", "irfft", "irfft_unnormalized"):
        lab = "x" if prim == "rfft" else "spec"
        cs.append(Case(prim + "_batch0", prim, {lab: F([]), "batch": 0, "n": 6}))
        cs.append(Case(prim + "_reject_n0", prim, {lab: F([]), "batch": 2, "n": 0},
                       status=ST_INVALID, needle="n"))
    cs.append(Case("irfft_reject_spec_length", "irfft",
                   dict(spec=F(np.zeros(8)), batch=1, n=4), status=ST_INVALID, needle="spec"))
    return cs


def scan_out(var):
    def fn(a):
        return NumpyRef._scan(a["A"], a["B"], a["X"], a["h0"], a["seq_len"], a["state"], var)
    return fn


def cases_scan():
    rng = np.random.default_rng(1010)
    cs = []
    ex = dict(A=F([0.5, 0.25]), B=F([1, 2]), X=F([2, 1, 4, -2, 0, 3]), h0=F([1, -1]), seq_len=3,
              state=2)
    cs.append(Case("scan_diag_spec_example", "scan_diag", dict(ex),
                   check={"out": [2.5, 1.75, 5.25, -3.5625, 2.625, 5.109375]}))
    cs.append(Case("scan_diag_backward_spec_example", "scan_diag_backward",
                   dict(ex, out=Derived(scan_out(False)), dy=F(np.ones(6))),
                   check={"dA": [10.75, -2.6875], "dB": [9.5, 1.8125],
                          "dX": [1.75, 2.625, 1.5, 2.5, 1, 2], "dh0": [0.875, 0.328125]}))
    exv = dict(ex, A=F([0.5, 0.25, 0.1, 0.75, -1, 0.2]), B=F([1, 2, 0.5, -1, 0.25, 0.5]))
    cs.append(Case("scan_diag_var_spec_example", "scan_diag_var", dict(exv),
                   check={"out": [2.5, 1.75, 2.25, 3.3125, -2.25, 2.1625]}))
    cs.append(Case("scan_diag_var_backward_spec_example", "scan_diag_var_backward",
                   dict(exv, out=Derived(scan_out(True)), dy=F(np.ones(6))),
                   check={"dA": [1, -1.9, 0, 2.1, 2.25, 3.3125], "dB": [2, 1.9, 0, -2.4, 0, 3],
                          "dX": [1, 3.8, 0, -1.2, 0.25, 0.5], "dh0": [0.5, 0.475]}))
    geoms = [("random", 20, 5, lambda s, n: rng.uniform(-0.95, 0.95, n)),
             ("growing", 24, 4, lambda s, n: rng.uniform(1.05, 1.3, n) *
              rng.choice([-1.0, 1.0], n)),
             ("long", 128, 2, lambda s, n: rng.uniform(0.9, 0.999, n)),
             ("zero_and_one", 10, 4, lambda s, n: rng.choice([0.0, 1.0, -1.0], n))]
    for name, T, S, agen in geoms:
        note = "|A| > 1: the state grows" if name == "growing" else None
        base = dict(A=F(agen(T, S)), B=F(rng.standard_normal(S)),
                    X=F(rng.standard_normal(T * S)), h0=F(rng.standard_normal(S)), seq_len=T,
                    state=S)
        cs.append(Case("scan_diag_" + name, "scan_diag", dict(base), note=note))
        cs.append(Case("scan_diag_backward_" + name, "scan_diag_backward",
                       dict(base, out=Derived(scan_out(False)),
                            dy=F(rng.standard_normal(T * S))), note=note))
        vbase = dict(base, A=F(agen(T, T * S)), B=F(rng.standard_normal(T * S)))
        cs.append(Case("scan_diag_var_" + name, "scan_diag_var", dict(vbase), note=note))
        cs.append(Case("scan_diag_var_backward_" + name, "scan_diag_var_backward",
                       dict(vbase, out=Derived(scan_out(True)),
                            dy=F(rng.standard_normal(T * S))), note=note))
    for name, T, S in (("seq0", 0, 3), ("state0", 4, 0)):
        e = dict(A=F(np.full(S, 0.5)), B=F(np.ones(S)), X=F([]), h0=F(np.ones(S)), seq_len=T,
                 state=S)
        ev = dict(e, A=F([]), B=F([]))
        cs.append(Case("scan_diag_" + name, "scan_diag", dict(e)))
        cs.append(Case("scan_diag_backward_" + name, "scan_diag_backward",
                       dict(e, out=F([]), dy=F([]))))
        cs.append(Case("scan_diag_var_" + name, "scan_diag_var", dict(ev)))
        cs.append(Case("scan_diag_var_backward_" + name, "scan_diag_var_backward",
                       dict(ev, out=F([]), dy=F([]))))
    cs.append(Case("scan_diag_reject_x_length", "scan_diag",
                   dict(A=F([0.5, 0.5]), B=F([1, 1]), X=F(np.zeros(5)), h0=F([0, 0]), seq_len=3,
                        state=2), status=ST_INVALID, needle="X"))
    cs.append(Case("scan_diag_var_reject_a_length", "scan_diag_var",
                   dict(A=F([0.5, 0.5]), B=F(np.ones(6)), X=F(np.zeros(6)), h0=F([0, 0]),
                        seq_len=3, state=2), status=ST_INVALID, needle="A"))
    cs.append(Case("scan_diag_backward_reject_dy_length", "scan_diag_backward",
                   dict(A=F([0.5, 0.5]), B=F([1, 1]), X=F(np.zeros(6)), h0=F([0, 0]),
                        out=F(np.zeros(6)), dy=F(np.zeros(4)), seq_len=3, state=2),
                   status=ST_INVALID, needle="dy"))
    return cs


def cases_gather():
    rng = np.random.default_rng(1011)
    cs = []
    mat = [1, 2, 3, 4, 5, 6]
    cs.append(Case("rows_scatter_add_spec_example", "rows_scatter_add",
                   dict(mat=F(mat), values=F([0.25, -0.5, 1, 1, 9, 9]), rows=3, cols=2,
                        indices=[1, 1, 7], k=3),
                   check={"out": [1, 2, 4.25, 4.5, 5, 6]}))
    m = rng.standard_normal(6 * 5)
    m[2 * 5 + 1] = NAN
    m[4 * 5 + 3] = -INF
    idx = [3, 0, 6, 2, 4, 4294967295, 5, 100, 2]
    cs.append(Case("rows_gather_mixed", "rows_gather",
                   dict(mat=F(m), rows=6, cols=5, indices=idx, k=len(idx)),
                   note="out-of-range rows are exact +0 (index_select rejects them), and a NaN "
                        "in the matrix never leaks into them"))
    cs.append(Case("rows_gather_all_rows_twice", "rows_gather",
                   dict(mat=F(rng.standard_normal(4 * 3)), rows=4, cols=3,
                        indices=[0, 1, 2, 3, 3, 2, 1, 0], k=8)))
    cs.append(Case("rows_gather_k0", "rows_gather",
                   dict(mat=F(rng.standard_normal(6)), rows=2, cols=3, indices=[], k=0)))
    cs.append(Case("rows_gather_rows0", "rows_gather",
                   dict(mat=F([]), rows=0, cols=3, indices=[0, 5], k=2)))
    cs.append(Case("rows_gather_cols0", "rows_gather",
                   dict(mat=F([]), rows=4, cols=0, indices=[1, 9], k=2)))
    cs.append(Case("rows_gather_reject_index_range", "rows_gather",
                   dict(mat=F(np.zeros(6)), rows=2, cols=3, indices=[0, 4294967296], k=2),
                   status=ST_INVALID, needle="indices[1]"))
    v = rng.standard_normal(9 * 5)
    v[3 * 5 + 2] = INF
    cs.append(Case("rows_scatter_add_mixed", "rows_scatter_add",
                   dict(mat=F(rng.standard_normal(6 * 5)), values=F(v), rows=6, cols=5,
                        indices=[2, 0, 2, 9, 5, 2, 4294967295, 0, 5], k=9),
                   note="out-of-range indices are ignored (index_add_ rejects them)"))
    cs.append(Case("rows_scatter_add_many_repeats", "rows_scatter_add",
                   dict(mat=F(rng.standard_normal(3 * 4)), values=F(rng.standard_normal(40 * 4)),
                        rows=3, cols=4, indices=list(rng.integers(0, 4, 40)), k=40)))
    cs.append(Case("rows_scatter_add_k0", "rows_scatter_add",
                   dict(mat=F(rng.standard_normal(6)), values=F([]), rows=2, cols=3, indices=[],
                        k=0)))
    cs.append(Case("rows_scatter_add_rows0", "rows_scatter_add",
                   dict(mat=F([]), values=F(rng.standard_normal(6)), rows=0, cols=3,
                        indices=[0, 1], k=2)))
    cs.append(Case("rows_scatter_add_reject_index_range", "rows_scatter_add",
                   dict(mat=F(np.zeros(6)), values=F(np.zeros(3)), rows=2, cols=3,
                        indices=[1 << 40], k=1), status=ST_INVALID, needle="indices[0]"))
    cs.append(Case("rows_scatter_add_reject_values_length", "rows_scatter_add",
                   dict(mat=F(np.zeros(6)), values=F(np.zeros(4)), rows=2, cols=3,
                        indices=[0, 1], k=2), status=ST_INVALID, needle="values"))
    return cs


FAMILIES = [
    ("softmax", cases_softmax),
    ("xent", cases_xent),
    ("conv", cases_conv),
    ("rows", cases_rows),
    ("vec", cases_vec),
    ("layout", cases_layout),
    ("layernorm", cases_layernorm),
    ("bmm", cases_bmm),
    ("fft", cases_fft),
    ("scan", cases_scan),
    ("gather", cases_gather),
]

ALL_PRIMS = [
    "softmax", "xent_weighted_mean", "xent_teacher", "conv", "rows_sum", "rows_max",
    "rows_first_max_mask", "rows_topk_mask", "rows_masked_softmax", "vec_concat", "vec_slice",
    "broadcast_col", "broadcast_to", "broadcast_to_adjoint", "swap_adjacent", "sum_axis",
    "layernorm_forward", "layernorm_backward", "bmm", "bmm_scaled", "rfft", "irfft",
    "irfft_unnormalized", "scan_diag", "scan_diag_backward", "scan_diag_var",
    "scan_diag_var_backward", "rows_gather", "rows_scatter_add",
]


# ---- generation -------------------------------------------------------------------------------


def check_spec_example(case, dtype, res):
    """Generation stops if the reference misses a contract example (given to
    about 7 digits)."""
    for label, want in case.check.items():
        got = res[label]
        want = np.asarray(want, dtype=np.float64)
        tol = 2e-6 * max(1.0, float(np.max(np.abs(want)))) if dtype == "f64" else \
            2e-5 * max(1.0, float(np.max(np.abs(want))))
        if got.shape != want.shape or np.any(np.abs(got - want) > tol):
            raise AssertionError("%s (%s): %s = %s, the contract says %s" %
                                 (case.name, dtype, label, got.tolist(), want.tolist()))


def family_text(fam, cases, backend, compare=None, report=None):
    lines = ["# bufkern golden vectors: %s (written by tests/golden/gen_golden.py)" % fam,
             "source " + backend.name]
    names = set()
    for case in cases:
        if case.name in names:
            raise AssertionError("duplicate case name " + case.name)
        names.add(case.name)
        for dtype in case.dtypes:
            case_lines, res = evaluate(case, dtype, backend)
            if res is not None and case.check:
                check_spec_example(case, dtype, res)
            if compare is not None and res is not None:
                _, res2 = evaluate(case, dtype, compare)
                compare_results(case, dtype, res, res2, report)
            lines += case_lines
    return "\n".join(lines) + "\n"


def compare_results(case, dtype, r1, r2, report):
    for label in r1:
        a, b = r1[label], r2.get(label)
        if b is None or a.shape != b.shape:
            report.append("%s %s %s: shapes differ" % (case.name, dtype, label))
            continue
        same_nan = np.array_equal(np.isnan(a), np.isnan(b))
        fin = np.isfinite(a) & np.isfinite(b)
        inf_ok = np.array_equal(a[~np.isfinite(a) & ~np.isnan(a)],
                                b[~np.isfinite(b) & ~np.isnan(b)]) and \
            np.array_equal(np.isinf(a), np.isinf(b))
        err = float(np.max(np.abs(a[fin] - b[fin]))) if fin.any() else 0.0
        mag = float(np.max(np.abs(a[fin]))) if fin.any() else 0.0
        if not same_nan or not inf_ok or err > 1e-11 * max(mag, 1e-300):
            report.append("%s %s %s: max |numpy - torch| = %.3g (magnitude %.3g)%s" %
                          (case.name, dtype, label, err, mag,
                           "" if same_nan and inf_ok else ", non-finite pattern differs"))


def all_cases():
    return [(fam, fn()) for fam, fn in FAMILIES]


def write_all(outdir, backend, compare=None):
    report = []
    sizes = 0
    fams = all_cases()
    covered = {c.prim for _, cs in fams for c in cs}
    missing = [p for p in ALL_PRIMS if p not in covered]
    if missing:
        raise AssertionError("primitives without cases: " + ", ".join(missing))
    os.makedirs(outdir, exist_ok=True)
    for fam, cases in fams:
        text = family_text(fam, cases, backend, compare, report)
        path = os.path.join(outdir, fam + ".txt")
        with open(path, "w") as f:
            f.write(text)
        sizes += len(text)
    return sizes, report


# ---- reading back (self-test) ------------------------------------------------------------------


def parse_file(path):
    cases = []
    cur = None
    source = None
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            tok = line.split()
            key = tok[0]
            if key == "source":
                source = tok[1]
            elif key == "case":
                assert cur is None, "case inside case"
                cur = {"name": tok[1], "prim": tok[2], "dtype": tok[3], "items": [], "notes": []}
            elif key == "note":
                cur["notes"].append(line[5:])
            elif key in ("int", "f", "d", "expect", "zeros"):
                n = int(tok[2])
                vals = tok[3:]
                assert len(vals) == n, "%s: %s has %d values, says %d" % (cur["name"], tok[1],
                                                                         len(vals), n)
                conv = int if key in ("int", "zeros") else float
                cur["items"].append((key, tok[1], [conv(v) for v in vals]))
            elif key == "tol":
                cur["items"].append(("tol", tok[1], [float(tok[2])]))
            elif key == "status":
                cur["items"].append(("status", tok[2], [int(tok[1])]))
            elif key == "end":
                cases.append(cur)
                cur = None
            else:
                raise AssertionError("unknown line " + line)
    assert cur is None, "unterminated case"
    return source, cases


def self_test():
    """Writes the numpy vectors to a temporary folder twice, checks they are
    byte-identical (same cases from the same seeds), reads them back and
    compares every value bit for bit with a fresh evaluation, checks the
    reference against independent numpy library routines, and checks the
    committed size budget."""
    ref = NumpyRef()
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        size1, _ = write_all(d1, ref)
        size2, _ = write_all(d2, ref)
        for fam, _ in FAMILIES:
            with open(os.path.join(d1, fam + ".txt"), "rb") as f1, \
                    open(os.path.join(d2, fam + ".txt"), "rb") as f2:
                assert f1.read() == f2.read(), fam + ": two runs differ"
        assert size1 == size2
        assert size1 < 2 * 1024 * 1024, "golden files too large: %d bytes" % size1
        ncases = 0
        for fam, cases in all_cases():
            source, parsed = parse_file(os.path.join(d1, fam + ".txt"))
            assert source == "numpy"
            expanded = [(c, dt) for c in cases for dt in c.dtypes]
            assert len(parsed) == len(expanded), fam + ": case count"
            for (case, dtype), p in zip(expanded, parsed):
                assert p["name"] == case.name and p["prim"] == case.prim and p["dtype"] == dtype
                a = materialize(case, dtype)
                items = {(k, lab): v for k, lab, v in p["items"]}
                for label, v in case.args.items():
                    if v is None:
                        assert ("f", label) not in items
                        continue
                    kind = arg_kind(v)
                    got = items[(kind, label)]
                    if kind == "f":  # float32 values are written in float32's shortest form
                        got = rnd(dtype, got)
                    want = a[label]
                    want = want if isinstance(want, (list, np.ndarray)) else [want]
                    assert np.array_equal(np.asarray(got, dtype=np.float64),
                                          np.asarray(want, dtype=np.float64), equal_nan=True), \
                        "%s %s: %s does not round-trip" % (case.name, dtype, label)
                if case.status is None:
                    call = {k: a[k] for k in case.args if case.args[k] is not None}
                    with np.errstate(all="ignore"):
                        res = getattr(ref, case.prim)(**call)
                    for label, vals in res.items():
                        got = rnd(dtype, items[("expect", label)])
                        want = rnd(dtype, np.asarray(vals, dtype=np.float64).ravel())
                        assert np.array_equal(got, want, equal_nan=True) and \
                            np.array_equal(np.signbit(got[~np.isnan(got)]),
                                           np.signbit(want[~np.isnan(want)])), \
                            "%s %s: expect %s does not round-trip" % (case.name, dtype, label)
                ncases += 1
    cross_check(ref)
    print("self-test passed: %d cases, %d bytes" % (ncases, size1))


def cross_check(ref):
    """The reference against numpy's own routines on random data: an
    independent second opinion for the transforms and contractions."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 8, 13, 64, 97):
        x = rng.standard_normal(3 * n)
        got = ref.rfft(x, 3, n)["out"].reshape(3, n // 2 + 1, 2)
        want = np.fft.rfft(x.reshape(3, n), axis=1)
        assert np.allclose(got[..., 0], want.real, atol=1e-12 * n) and \
            np.allclose(got[..., 1], want.imag, atol=1e-12 * n), "rfft n=%d" % n
        spec = rng.standard_normal(3 * (n // 2 + 1) * 2)
        sp = spec.reshape(3, n // 2 + 1, 2)
        c = sp[..., 0] + 1j * sp[..., 1]
        c[:, 0] = c[:, 0].real
        if n % 2 == 0:
            c[:, n // 2] = c[:, n // 2].real
        want = np.fft.irfft(c, n=n, axis=1)
        assert np.allclose(ref.irfft(spec, 3, n)["out"], want.ravel(), atol=1e-12), "irfft"
        assert np.allclose(ref.irfft_unnormalized(spec, 3, n)["out"], n * want.ravel(),
                           atol=1e-11 * n), "irfft_unnormalized"
    A = rng.standard_normal(2 * 3 * 4)
    B = rng.standard_normal(2 * 4 * 5)
    got = ref.bmm(A, B, 2, 3, 4, 5, 1, 1)["out"]
    want = np.matmul(A.reshape(2, 4, 3).transpose(0, 2, 1), B.reshape(2, 5, 4).transpose(0, 2, 1))
    assert np.allclose(got, want.ravel(), atol=1e-13), "bmm"
    # conv against a direct evaluation of contract §3.4's sum at every output.
    x = rng.standard_normal(2 * 4 * 7 * 6)
    w = rng.standard_normal(4 * 4 * 3 * 2)
    bias = rng.standard_normal(4)
    geo = dict(input_dims=[2, 4, 7, 6], kernel_dims=[4, 4, 3, 2], spatial_rank=2, stride=[2, 1],
               pad_before=[1, 0], pad_after=[0, 2], dilation=[1, 2], groups=2)
    got = ref.conv(x, w, bias=bias, **geo)["out"]
    xs = x.reshape(2, 4, 7, 6)
    ws = w.reshape(4, 4, 3, 2)
    o1, o2 = (7 + 1 - 3) // 2 + 1, (6 + 2 - 3) // 1 + 1
    want = np.zeros((2, 4, o1, o2))
    for nb in range(2):
        for oc in range(4):
            g = oc // 2
            for i in range(o1):
                for j in range(o2):
                    s = bias[oc]
                    for jj in range(2):
                        for k1 in range(3):
                            for k2 in range(2):
                                p1 = i * 2 + k1 * 1 - 1
                                p2 = j * 1 + k2 * 2 - 0
                                if 0 <= p1 < 7 and 0 <= p2 < 6:
                                    s += xs[nb, g * 2 + jj, p1, p2] * ws[oc, g * 2 + jj, k1, k2]
                    want[nb, oc, i, j] = s
    assert np.allclose(got, want.ravel(), atol=1e-12), "conv"
    # softmax against the log-sum-exp form.
    x = rng.standard_normal(24)
    got = ref.softmax(x, [2, 3, 4], 1)["out"].reshape(2, 3, 4)
    t = x.reshape(2, 3, 4)
    lse = np.log(np.sum(np.exp(t), axis=1, keepdims=True))
    assert np.allclose(got, np.exp(t - lse), atol=1e-14), "softmax"
    # the scan backward against finite differences of the forward.
    T, S = 6, 3
    A, B = rng.uniform(-1.2, 1.2, S), rng.standard_normal(S)
    X, h0, dy = rng.standard_normal(T * S), rng.standard_normal(S), rng.standard_normal(T * S)

    def loss(A_, B_, X_, h0_):
        return float(np.dot(ref.scan_diag(A_, B_, X_, h0_, T, S)["out"], dy))
    out = ref.scan_diag(A, B, X, h0, T, S)["out"]
    g = ref.scan_diag_backward(A, B, X, h0, out, dy, T, S)
    for name, arr, idx in (("dA", A, 0), ("dB", B, 1), ("dX", X, 2), ("dh0", h0, 3)):
        for i in range(arr.size):
            args = [A.copy(), B.copy(), X.copy(), h0.copy()]
            args[idx][i] += 1e-6
            up = loss(*args)
            args[idx][i] -= 2e-6
            fd = (up - loss(*args)) / 2e-6
            assert abs(fd - g[name][i]) < 1e-5 * max(1.0, abs(fd)), "scan %s[%d]" % (name, i)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("numpy", "torch"), default="numpy")
    ap.add_argument("--out", default=HERE, help="output folder (default: this script's)")
    ap.add_argument("--compare", action="store_true",
                    help="with --backend torch: also run the numpy reference and report "
                         "every disagreement")
    ap.add_argument("--self-test", action="store_true",
                    help="check the writer, the reader and the numpy reference; writes nothing")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    backend = TorchRef() if args.backend == "torch" else NumpyRef()
    compare = NumpyRef() if args.compare and args.backend == "torch" else None
    size, report = write_all(args.out, backend, compare)
    print("wrote %d bytes of golden vectors to %s (source %s)" % (size, args.out, backend.name))
    if compare is not None:
        for line in report:
            print("DIFF " + line)
        print("%d disagreements between torch and numpy" % len(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

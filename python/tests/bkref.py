"""float64 numpy references for every primitive, and the contract's tolerances.

Each reference follows the formulas of include/bufkern.h (with the worked
examples and accuracy rules of docs/CONTRACT.md) literally, on float64 data, so the tests compare the library against the
contract rather than against another implementation of the same kernels.
"""

import itertools

import numpy as np

# Section 4 of the contract: float32 / float64 bounds by kind.
_TOL = {
    "elem": {np.float32: 1e-5, np.float64: 1e-12},
    "red": {np.float32: 1e-4, np.float64: 1e-12},
    "contract": {np.float32: 1e-4, np.float64: 1e-12},
}


def assert_close(got, ref, dtype, kind="red", scale=None, n=1):
    """||got - ref||_inf <= tol(kind, dtype) * scale (* sqrt(n) for contractions).

    scale defaults to the result's magnitude max(|ref|) (at least 1e-300).
    kind "exact" requires equal values (NaN matching NaN).
    """
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    assert got.shape == ref.shape, f"shape {got.shape} != reference {ref.shape}"
    if kind == "exact":
        same = (got == ref) | (np.isnan(got) & np.isnan(ref))
        assert same.all(), f"first mismatch at {int(np.flatnonzero(~same)[0])}: {got[~same][:5]} vs {ref[~same][:5]}"
        return
    nan_ref = np.isnan(ref)
    assert (np.isnan(got) == nan_ref).all(), "NaN positions differ from the reference"
    inf_ref = np.isinf(ref)
    assert (got[inf_ref] == ref[inf_ref]).all(), "infinities differ from the reference"
    fin = ~(nan_ref | inf_ref)
    if not fin.any():
        return
    if scale is None:
        scale = max(float(np.max(np.abs(ref[fin]))), 1e-300)
    tol = _TOL[kind][np.dtype(dtype).type] * scale * (np.sqrt(n) if kind == "contract" else 1.0)
    err = float(np.max(np.abs(got[fin] - ref[fin])))
    assert err <= tol, f"max error {err:.3e} > tolerance {tol:.3e} ({kind}, {np.dtype(dtype).name})"


def assert_example(got, expected, dtype):
    """The contract's examples are given to ~7 significant digits."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    expected = np.asarray(expected, dtype=np.float64).reshape(-1)
    rtol = 1e-6 if np.dtype(dtype) == np.float64 else 2e-5
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * max(1.0, np.abs(expected).max()))


# ---- 3.1 softmax -------------------------------------------------------------


def softmax(x, axis):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True)


# ---- 3.2, 3.3 cross-entropies ----------------------------------------------------


def _lse(x):
    m = x.max(axis=1, keepdims=True)
    return m + np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def xent_weighted_mean(x, w):
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return 0.0
    lse = _lse(x)
    with np.errstate(invalid="ignore", over="ignore"):
        terms = w * (lse - x)
        bad = ~np.isfinite(lse - x)
        # "so a zero weight contributes exactly 0": in the recomputation a
        # zero factor annihilates an infinite one (0 * inf = 0, not NaN).
        terms[bad] = (_mul0(w, np.broadcast_to(lse, x.shape)) - _mul0(w, x))[bad]
    return terms.sum() / max(rows, 1)


def _mul0(a, b):
    with np.errstate(invalid="ignore"):
        p = a * b
    return np.where(((a == 0) & np.isinf(b)) | ((b == 0) & np.isinf(a)), 0.0, p)


def xent_teacher(s, t, gradient):
    s = np.asarray(s, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    rows, cols = s.shape
    if rows == 0 or cols == 0:
        return np.zeros(0) if gradient else 0.0
    p = softmax(t, 1)
    if gradient:
        return (softmax(s, 1) - p) / max(rows, 1)
    sh = s - s.max(axis=1, keepdims=True)
    loss = np.log(np.exp(sh).sum(axis=1)) - (p * sh).sum(axis=1)
    return loss.sum() / max(rows, 1)


# ---- 3.4 convolution ---------------------------------------------------------------


def conv(x, w, bias, input_dims, kernel_dims, stride, pad_before, pad_after, dilation, groups):
    sr = len(kernel_dims) - 2
    c_in = input_dims[-sr - 1]
    batch = int(np.prod(input_dims[: len(input_dims) - sr - 1], dtype=np.int64))
    spatial = list(input_dims[-sr:])
    x = np.asarray(x, dtype=np.float64).reshape(batch, c_in, *spatial)
    w = np.asarray(w, dtype=np.float64).reshape(kernel_dims)
    c_out = kernel_dims[0]
    pads = [(0, 0), (0, 0)] + [(pad_before[a], pad_after[a]) for a in range(sr)]
    xp = np.pad(x, pads)
    outs = []
    for a in range(sr):
        padded = spatial[a] + pad_before[a] + pad_after[a]
        eff = (kernel_dims[2 + a] - 1) * dilation[a] + 1
        outs.append(0 if padded < eff else (padded - eff) // stride[a] + 1)
    y = np.zeros((batch, c_out, *outs))
    if 0 in outs or batch == 0:
        return y
    ig, og = c_in // groups, c_out // groups
    for oc in range(c_out):
        g = oc // og
        for j in range(ig):
            ic = g * ig + j
            for kap in itertools.product(*[range(k) for k in kernel_dims[2:]]):
                sl = tuple(
                    slice(kap[a] * dilation[a], kap[a] * dilation[a] + (outs[a] - 1) * stride[a] + 1, stride[a])
                    for a in range(sr)
                )
                y[:, oc] += w[(oc, ic) + kap] * xp[(slice(None), ic) + sl]
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64).reshape((1, c_out) + (1,) * sr)
    return y


# ---- 3.5 rows ------------------------------------------------------------------------


def rows_max(x):
    x = np.asarray(x, dtype=np.float64)
    rows, cols = x.shape
    if cols == 0:
        return np.zeros(rows)
    out = np.full(rows, -np.inf)
    for i in range(rows):
        v = x[i][~np.isnan(x[i])]
        if v.size:
            out[i] = v.max()
    return out


def rows_first_max_mask(x):
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        best, arg = x[i, 0], 0
        for j in range(1, x.shape[1]):
            if x[i, j] > best:
                best, arg = x[i, j], j
        out[i, arg] = 1.0
    return out


def rows_topk_mask(x, k):
    x = np.asarray(x, dtype=np.float64)
    rows, cols = x.shape
    out = np.zeros_like(x)
    idx = np.arange(cols)
    for r in range(rows):
        xi = x[r][None, :]  # entry i along axis 1
        xj = x[r][:, None]  # competitor j along axis 0
        greater = xj > xi
        neither = ~greater & ~(xi > xj)
        beats = greater | (neither & (idx[:, None] < idx[None, :]))
        out[r] = (beats.sum(axis=0) < k).astype(np.float64)
    return out


def rows_masked_softmax(s, mask):
    s = np.asarray(s, dtype=np.float64)
    allowed = np.asarray(mask) != 0
    out = np.zeros_like(s)
    for r in range(s.shape[0]):
        a = allowed[r]
        if a.any():
            v = s[r][a]
            e = np.exp(v - v.max())
            out[r][a] = e / e.sum()
    return out


# ---- 3.6 broadcasts and layout ----------------------------------------------------------


def _broadcast_index(in_dims, out_dims, axis_map):
    """For every output element (row-major), the flat input index it reads."""
    in_strides = [int(np.prod(in_dims[a + 1:], dtype=np.int64)) for a in range(len(in_dims))]
    coords = np.indices(out_dims).reshape(len(out_dims), -1) if out_dims else np.zeros((0, 1), int)
    idx = np.zeros(coords.shape[1], dtype=np.int64)
    for j, m in enumerate(axis_map):
        if m:
            a = m - 1
            if in_dims[a] != 1:
                idx += coords[j] * in_strides[a]
    return idx


def broadcast_to(x, in_dims, out_dims, axis_map):
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    return x[_broadcast_index(in_dims, out_dims, axis_map)].reshape(out_dims)


def broadcast_to_adjoint(dout, in_dims, out_dims, axis_map):
    dout = np.asarray(dout, dtype=np.float64).reshape(-1)
    din = np.zeros(int(np.prod(in_dims, dtype=np.int64)))
    np.add.at(din, _broadcast_index(in_dims, out_dims, axis_map), dout)
    return din.reshape(in_dims)


# ---- 3.7 layer norm ----------------------------------------------------------------------


def layernorm_forward(x, gamma, beta, eps):
    x = np.asarray(x, dtype=np.float64)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    norm = (x - mu) * inv
    return norm * np.asarray(gamma, np.float64) + np.asarray(beta, np.float64), norm, inv[:, 0]


def layernorm_backward(dout, norm, inv, gamma):
    dout = np.asarray(dout, dtype=np.float64)
    norm = np.asarray(norm, dtype=np.float64)
    inv = np.asarray(inv, dtype=np.float64)
    cols = dout.shape[1]
    g = dout * np.asarray(gamma, np.float64)
    s1 = g.sum(axis=1, keepdims=True)
    s2 = (g * norm).sum(axis=1, keepdims=True)
    dx = inv[:, None] / cols * (cols * g - s1 - norm * s2)
    return dx, (dout * norm).sum(axis=0), dout.sum(axis=0)


# ---- 3.8 bmm ---------------------------------------------------------------------------------


def bmm(a, b, batch, m, n, p, trans_a, trans_b, scale=1.0):
    a = np.asarray(a, dtype=np.float64).reshape((batch, n, m) if trans_a else (batch, m, n))
    b = np.asarray(b, dtype=np.float64).reshape((batch, p, n) if trans_b else (batch, n, p))
    if trans_a:
        a = a.transpose(0, 2, 1)
    if trans_b:
        b = b.transpose(0, 2, 1)
    return scale * (a @ b), scale * (np.abs(a) @ np.abs(b))


# ---- 3.9 FFT ------------------------------------------------------------------------------------


def rfft(x, batch, n):
    c = np.fft.rfft(np.asarray(x, dtype=np.float64).reshape(batch, n), axis=1)
    return np.stack([c.real, c.imag], axis=-1)


def irfft(spec, batch, n, normalized=True):
    s = np.asarray(spec, dtype=np.float64).reshape(batch, n // 2 + 1, 2)
    c = s[..., 0] + 1j * s[..., 1]
    c[:, 0] = c[:, 0].real
    if n % 2 == 0:
        c[:, n // 2] = c[:, n // 2].real
    y = np.fft.irfft(c, n=n, axis=1)
    return y if normalized else y * n


# ---- 3.10 scans ------------------------------------------------------------------------------------


def scan(A, B, X, h0, var):
    X = np.asarray(X, dtype=np.float64)
    T, S = X.shape
    A = np.asarray(A, dtype=np.float64).reshape((T, S) if var else (S,))
    B = np.asarray(B, dtype=np.float64).reshape((T, S) if var else (S,))
    h = np.asarray(h0, dtype=np.float64).copy()
    out = np.zeros((T, S))
    for t in range(T):
        a = A[t] if var else A
        b = B[t] if var else B
        h = a * h + b * X[t]
        out[t] = h
    return out


def scan_backward(A, B, X, h0, out, dy, var):
    X = np.asarray(X, dtype=np.float64)
    T, S = X.shape
    A = np.asarray(A, dtype=np.float64).reshape((T, S) if var else (S,))
    B = np.asarray(B, dtype=np.float64).reshape((T, S) if var else (S,))
    h0 = np.asarray(h0, dtype=np.float64)
    out = np.asarray(out, dtype=np.float64).reshape(T, S)
    dy = np.asarray(dy, dtype=np.float64).reshape(T, S)
    g = np.zeros((T, S))
    nxt = np.zeros(S)
    for t in range(T - 1, -1, -1):
        a_next = (A[t + 1] if t + 1 < T else np.zeros(S)) if var else A
        g[t] = dy[t] + a_next * nxt
        nxt = g[t]
    hprev = np.vstack([h0[None, :], out[:-1]]) if T else np.zeros((0, S))
    if var:
        dA, dB, dX = g * hprev, g * X, g * B
        dh0 = A[0] * g[0] if T else np.zeros(S)
    else:
        dA, dB, dX = (g * hprev).sum(axis=0), (g * X).sum(axis=0), g * B
        dh0 = A * g[0] if T else np.zeros(S)
    return dA, dB, dX, dh0


# ---- 3.11 gather / scatter ---------------------------------------------------------------------------


def rows_gather(mat, rows, cols, idx):
    mat = np.asarray(mat, dtype=np.float64).reshape(rows, cols)
    out = np.zeros((len(idx), cols))
    for r, i in enumerate(idx):
        if i < rows:
            out[r] = mat[i]
    return out


def rows_scatter_add(mat, values, rows, cols, idx):
    out = np.asarray(mat, dtype=np.float64).reshape(rows, cols).copy()
    values = np.asarray(values, dtype=np.float64).reshape(len(idx), cols)
    for r, i in enumerate(idx):
        if i < rows:
            out[i] += values[r]
    return out

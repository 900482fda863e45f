"""Diagonal selective scans and their gradients (contract §3.10)."""

import numpy as np
import pytest

import bkref
import bufkern

A, B, H0, X = [0.5, 0.25], [1, 2], [1, -1], [2, 1, 4, -2, 0, 3]
AV = [0.5, 0.25, 0.1, 0.75, -1, 0.2]
BV = [1, 2, 0.5, -1, 0.25, 0.5]


def test_spec_example_shared(put, dtype):
    args = [put(v, dtype) for v in (A, B, X, H0)]
    out = bufkern.scan_diag(*args, seq_len=3, state=2)
    assert out.shape == (3, 2)
    bkref.assert_example(out.numpy(), [2.5, 1.75, 5.25, -3.5625, 2.625, 5.109375], dtype)
    dA, dB, dX, dh0 = bufkern.scan_diag_backward(*args, out, put(np.ones(6), dtype), seq_len=3, state=2)
    assert dA.shape == (2,) and dX.shape == (3, 2) and dh0.shape == (2,)
    bkref.assert_example(dA.numpy(), [10.75, -2.6875], dtype)
    bkref.assert_example(dB.numpy(), [9.5, 1.8125], dtype)
    bkref.assert_example(dX.numpy(), [1.75, 2.625, 1.5, 2.5, 1, 2], dtype)
    bkref.assert_example(dh0.numpy(), [0.875, 0.328125], dtype)


def test_spec_example_var(put, dtype):
    args = [put(v, dtype) for v in (AV, BV, X, H0)]
    out = bufkern.scan_diag_var(*args, seq_len=3, state=2)
    bkref.assert_example(out.numpy(), [2.5, 1.75, 2.25, 3.3125, -2.25, 2.1625], dtype)
    dA, dB, dX, dh0 = bufkern.scan_diag_var_backward(*args, out, put(np.ones(6), dtype), seq_len=3, state=2)
    assert dA.shape == (3, 2) and dB.shape == (3, 2)
    bkref.assert_example(dA.numpy(), [1, -1.9, 0, 2.1, 2.25, 3.3125], dtype)
    bkref.assert_example(dB.numpy(), [2, 1.9, 0, -2.4, 0, 3], dtype)
    bkref.assert_example(dX.numpy(), [1, 3.8, 0, -1.2, 0.25, 0.5], dtype)
    bkref.assert_example(dh0.numpy(), [0.5, 0.475], dtype)


def _scale(ref_abs):
    return max(float(np.max(ref_abs)), 1e-300)


@pytest.mark.parametrize("var", [False, True], ids=["shared", "var"])
@pytest.mark.parametrize("T,S", [(50, 7), (300, 3), (1, 5), (8, 1)])
def test_random(put, dtype, rng, var, T, S):
    coef = (T, S) if var else (S,)
    a = rng.uniform(-1.05, 1.05, coef)
    b = rng.standard_normal(coef)
    x = rng.standard_normal((T, S))
    h0 = rng.standard_normal(S)
    a, b, x, h0 = (v.astype(dtype) for v in (a, b, x, h0))
    bufs = [put(v, dtype) for v in (a, b, x, h0)]
    fwd = bufkern.scan_diag_var if var else bufkern.scan_diag
    bwd = bufkern.scan_diag_var_backward if var else bufkern.scan_diag_backward
    out = fwd(*bufs, seq_len=T, state=S)
    ref = bkref.scan(a, b, x, h0, var)
    absref = bkref.scan(np.abs(a), np.abs(b), np.abs(x), np.abs(h0), var)
    bkref.assert_close(out.numpy(), ref, dtype, "red", scale=_scale(absref))
    dy = rng.standard_normal((T, S)).astype(dtype)
    got = bwd(*bufs, out, put(dy, dtype), seq_len=T, state=S)
    refs = bkref.scan_backward(a, b, x, h0, out.numpy(), dy, var)
    abs_refs = bkref.scan_backward(np.abs(a), np.abs(b), np.abs(x), np.abs(h0), np.abs(out.numpy()),
                                   np.abs(dy), var)
    for name, g, r, ra in zip(("dA", "dB", "dX", "dh0"), got, refs, abs_refs):
        assert g.length == np.asarray(r).size, name
        bkref.assert_close(g.numpy(), r, dtype, "red", scale=_scale(ra))


def test_empty(put, dtype):
    e = put([], dtype)
    s = put(np.ones(3), dtype)
    assert bufkern.scan_diag(s, s, e, s, seq_len=0, state=3).length == 0
    dA, dB, dX, dh0 = bufkern.scan_diag_backward(s, s, e, s, e, e, seq_len=0, state=3)
    assert dX.length == 0
    for g in (dA, dB, dh0):
        bkref.assert_close(g.numpy(), [0, 0, 0], dtype, "exact")
    dA, dB, dX, dh0 = bufkern.scan_diag_var_backward(e, e, e, s, e, e, seq_len=0, state=3)
    assert dA.length == dB.length == dX.length == 0
    bkref.assert_close(dh0.numpy(), [0, 0, 0], dtype, "exact")
    assert bufkern.scan_diag_var(e, e, e, e, seq_len=5, state=0).length == 0


def test_rejections(put, dtype):
    s = put(np.ones(2), dtype)
    x = put(np.ones(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.scan_diag(s, s, x, s, seq_len=3, state=3)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.scan_diag_var(s, s, x, s, seq_len=3, state=2)  # A must be (seq_len, state)
    with pytest.raises(bufkern.NullError):
        bufkern.scan_diag(s, s, x, None, seq_len=3, state=2)
    with pytest.raises(bufkern.InvalidArgumentError, match="seq_len"):
        bufkern.scan_diag(s, s, x, s, seq_len=-3, state=2)

"""bufkern.xent_weighted_mean and bufkern.xent_teacher (contract §3.2, 3.3)."""

import numpy as np
import pytest

import bkref
import bufkern

S = [[1, 2, 3], [0.5, -0.5, 0]]


def test_weighted_mean_spec_example(put, dtype):
    w = [[0, 0, 1], [0.2, 0.3, 0.5]]
    loss = bufkern.xent_weighted_mean(put(S, dtype), put(w, dtype), rows=2, cols=3)
    assert loss.shape == () and loss.dtype == dtype
    bkref.assert_example(loss.item(), 0.8189378, dtype)


def test_teacher_spec_example(put, dtype):
    T = [[3, 2, 1], [0, 0, 0]]
    loss = bufkern.xent_teacher(put(S, dtype), put(T, dtype), rows=2, cols=3)
    bkref.assert_example(loss.item(), 1.5815430, dtype)
    grad = bufkern.xent_teacher(put(S, dtype), put(T, dtype), rows=2, cols=3, gradient=True)
    assert grad.shape == (2, 3)
    bkref.assert_example(grad.numpy(), [[-0.2876052, 0, 0.2876052],
                                        [0.0865735, -0.0735048, -0.0130687]], dtype)


@pytest.mark.parametrize("rows,cols", [(9, 17), (3, 300), (1, 1)])
def test_random(put, dtype, rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 3).astype(dtype)
    w = rng.random((rows, cols)).astype(dtype)
    t = (rng.standard_normal((rows, cols)) * 2).astype(dtype)
    got = bufkern.xent_weighted_mean(put(x, dtype), put(w, dtype), rows=rows, cols=cols).item()
    ref = bkref.xent_weighted_mean(x, w)
    bkref.assert_close(got, ref, dtype, "red", scale=max(abs(ref), np.abs(w).sum() / rows))
    got = bufkern.xent_teacher(put(x, dtype), put(t, dtype), rows=rows, cols=cols).item()
    ref = bkref.xent_teacher(x, t, False)
    bkref.assert_close(got, ref, dtype, "red", scale=max(abs(ref), 1.0))
    got = bufkern.xent_teacher(put(x, dtype), put(t, dtype), rows=rows, cols=cols, gradient=1).numpy()
    bkref.assert_close(got, bkref.xent_teacher(x, t, True), dtype, "red", scale=1.0 / rows)


def test_zero_weight_on_minus_infinity_contributes_zero(put, dtype):
    x = [[0.0, -np.inf, 1.0]]
    w = [[0.5, 0.0, 0.5]]
    got = bufkern.xent_weighted_mean(put(x, dtype), put(w, dtype), rows=1, cols=3).item()
    bkref.assert_close(got, bkref.xent_weighted_mean(np.array(x), np.array(w)), dtype, "red")


def test_empty(put, dtype):
    e = put(np.zeros(0), dtype)
    assert bufkern.xent_weighted_mean(e, e, rows=0, cols=5).item() == 0.0
    assert bufkern.xent_teacher(e, e, rows=3, cols=0).item() == 0.0
    assert bufkern.xent_teacher(e, e, rows=0, cols=3, gradient=True).length == 0


def test_rejections(put, dtype):
    x = put(np.zeros(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="gradient"):
        bufkern.xent_teacher(x, x, rows=2, cols=3, gradient=2)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.xent_weighted_mean(x, put(np.zeros(5), dtype), rows=2, cols=3)
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises(bufkern.DtypeError):
        bufkern.xent_teacher(x, put(np.zeros(6), other), rows=2, cols=3)

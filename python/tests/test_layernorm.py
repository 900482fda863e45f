"""bufkern.layernorm_forward / layernorm_backward (contract §3.7)."""

import numpy as np
import pytest

import bkref
import bufkern

X = [[0.1, 0.2, 0, -0.1], [-0.3, 0.5, 0.2, 0.1]]
GAMMA = [1, 0.9, 1.1, 1]
BETA = [0, 0.1, -0.1, 0]


def test_spec_example(put, dtype):
    out, norm, inv = bufkern.layernorm_forward(put(X, dtype), put(GAMMA, dtype), put(BETA, dtype),
                                               rows=2, cols=4, eps=1e-5)
    assert out.shape == (2, 4) and norm.shape == (2, 4) and inv.shape == (2,)
    bkref.assert_example(out.numpy(), [[0.447035, 1.306994, -0.591738, -1.341104],
                                       [-1.485206, 1.279428, 0.188305, -0.087365]], dtype)
    bkref.assert_example(inv.numpy(), [8.940696, 3.494603], dtype)
    dx, dgamma, dbeta = bufkern.layernorm_backward(put(np.ones((2, 4)), dtype), norm, inv,
                                                   put(GAMMA, dtype), rows=2, cols=4)
    assert dx.shape == (2, 4) and dgamma.shape == (4,) and dbeta.shape == (4,)
    bkref.assert_example(dx.numpy(), [[0.178671, -0.358057, 0.715399, -0.536013],
                                      [-0.136033, -0.229431, 0.373466, -0.008002]], dtype)
    bkref.assert_example(dgamma.numpy(), [-1.038171, 2.651581, -0.184940, -1.428470], dtype)
    bkref.assert_example(dbeta.numpy(), [2, 2, 2, 2], dtype)


@pytest.mark.parametrize("rows,cols", [(9, 31), (3, 1000), (17, 1), (1, 2)])
def test_random(put, dtype, rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 3 + 1).astype(dtype)
    g = rng.standard_normal(cols).astype(dtype)
    b = rng.standard_normal(cols).astype(dtype)
    out, norm, inv = bufkern.layernorm_forward(put(x, dtype), put(g, dtype), put(b, dtype), rows=rows, cols=cols,
                                               eps=1e-3)
    r_out, r_norm, r_inv = bkref.layernorm_forward(x, g, b, 1e-3)
    bkref.assert_close(norm.numpy(), r_norm, dtype, "red", scale=max(1.0, np.abs(r_norm).max()))
    bkref.assert_close(out.numpy(), r_out, dtype, "red",
                       scale=(np.abs(r_norm) * np.abs(g) + np.abs(b)).max())
    bkref.assert_close(inv.numpy(), r_inv, dtype, "red")
    dout = rng.standard_normal((rows, cols)).astype(dtype)
    dx, dg, db = bufkern.layernorm_backward(put(dout, dtype), norm, inv, put(g, dtype), rows=rows, cols=cols)
    n64, i64 = norm.numpy(), inv.numpy()
    r_dx, r_dg, r_db = bkref.layernorm_backward(dout, n64, i64, g)
    gabs = np.abs(dout) * np.abs(g)
    dx_scale = (i64[:, None] / cols * (cols * gabs + gabs.sum(1, keepdims=True)
                                       + np.abs(n64) * (gabs * np.abs(n64)).sum(1, keepdims=True))).max()
    bkref.assert_close(dx.numpy(), r_dx, dtype, "red", scale=dx_scale)
    bkref.assert_close(dg.numpy(), r_dg, dtype, "red", scale=(np.abs(dout) * np.abs(n64)).sum(0).max())
    bkref.assert_close(db.numpy(), r_db, dtype, "red", scale=np.abs(dout).sum(0).max())


def test_empty_rows(put, dtype):
    e = put(np.zeros(0), dtype)
    g = put(np.ones(3), dtype)
    out, norm, inv = bufkern.layernorm_forward(e, g, g, rows=0, cols=3)
    assert out.length == norm.length == inv.length == 0
    dx, dg, db = bufkern.layernorm_backward(e, e, e, g, rows=0, cols=3)
    assert dx.length == 0
    bkref.assert_close(dg.numpy(), [0, 0, 0], dtype, "exact")
    bkref.assert_close(db.numpy(), [0, 0, 0], dtype, "exact")


def test_rejections(put, dtype):
    x = put(np.zeros(8), dtype)
    g = put(np.ones(4), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="eps"):
        bufkern.layernorm_forward(x, g, g, rows=2, cols=4, eps=-1.0)
    with pytest.raises(bufkern.InvalidArgumentError, match="eps"):
        bufkern.layernorm_forward(x, g, g, rows=2, cols=4, eps=float("nan"))
    with pytest.raises(bufkern.InvalidArgumentError, match="cols"):
        bufkern.layernorm_forward(put([], dtype), put([], dtype), put([], dtype), rows=2, cols=0)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.layernorm_forward(x, put(np.ones(3), dtype), g, rows=2, cols=4)
    with pytest.raises(bufkern.InvalidArgumentError, match="cols"):
        bufkern.layernorm_backward(put([], dtype), put([], dtype), put(np.ones(2), dtype),
                                   put([], dtype), rows=2, cols=0)
    with pytest.raises(TypeError, match="eps"):
        bufkern.layernorm_forward(x, g, g, rows=2, cols=4, eps="small")

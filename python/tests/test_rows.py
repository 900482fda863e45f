"""Row reductions and masks (contract §3.5)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_spec_examples(put, dtype):
    x = put([3, 1, 3, 2], dtype)
    bkref.assert_close(bufkern.rows_first_max_mask(x, rows=1, cols=4).numpy(), [1, 0, 0, 0], dtype, "exact")
    bkref.assert_close(bufkern.rows_topk_mask(x, rows=1, cols=4, k=2).numpy(), [1, 0, 1, 0], dtype, "exact")
    bkref.assert_close(bufkern.rows_topk_mask(x, rows=1, cols=4, k=3).numpy(), [1, 0, 1, 1], dtype, "exact")
    bkref.assert_close(bufkern.rows_topk_mask(put([1, np.nan, 2], dtype), rows=1, cols=3, k=2).numpy(),
                       [1, 1, 1], dtype, "exact")
    y = bufkern.rows_masked_softmax(put([1000, -1000, 3, 4], dtype), put([0, 1, 0, 0], dtype),
                                    rows=2, cols=2)
    bkref.assert_close(y.numpy(), [0, 1, 0, 0], dtype, "exact")


@pytest.mark.parametrize("rows,cols", [(13, 37), (2, 1000), (40, 1), (1, 5)])
def test_random(put, dtype, rng, rows, cols):
    a = (rng.standard_normal((rows, cols)) * 5).astype(dtype)
    x = put(a, dtype)
    s = bufkern.rows_sum(x, rows=rows, cols=cols)
    assert s.shape == (rows,)
    bkref.assert_close(s.numpy(), a.astype(np.float64).sum(1), dtype, "red",
                       scale=np.abs(a).astype(np.float64).sum(1).max())
    bkref.assert_close(bufkern.rows_max(x, rows=rows, cols=cols).numpy(), bkref.rows_max(a), dtype, "exact")
    m = bufkern.rows_first_max_mask(x, rows=rows, cols=cols)
    assert m.shape == (rows, cols)
    bkref.assert_close(m.numpy(), bkref.rows_first_max_mask(a), dtype, "exact")
    for k in (0, 1, 3, cols, cols + 2):
        bkref.assert_close(bufkern.rows_topk_mask(x, rows=rows, cols=cols, k=k).numpy(),
                           bkref.rows_topk_mask(a, k), dtype, "exact")
    mask = (rng.random((rows, cols)) < 0.6).astype(dtype)
    y = bufkern.rows_masked_softmax(x, put(mask, dtype), rows=rows, cols=cols)
    bkref.assert_close(y.numpy(), bkref.rows_masked_softmax(a, mask), dtype, "red", scale=1.0)


def test_ties_nan_and_infinities(put, dtype):
    a = np.array([[2, 5, 5, 1], [-np.inf, -np.inf, -np.inf, -np.inf], [np.nan, 1, 2, 2],
                  [1, 1, 1, 1]])
    x = put(a, dtype)
    bkref.assert_close(bufkern.rows_first_max_mask(x, rows=4, cols=4).numpy(), bkref.rows_first_max_mask(a),
                       dtype, "exact")
    bkref.assert_close(bufkern.rows_max(x, rows=4, cols=4).numpy(), bkref.rows_max(a), dtype, "exact")
    bkref.assert_close(bufkern.rows_max(put([np.nan, np.nan], dtype), rows=1, cols=2).numpy(), [-np.inf],
                       dtype, "exact")
    for k in (1, 2, 3):
        bkref.assert_close(bufkern.rows_topk_mask(x, rows=4, cols=4, k=k).numpy(), bkref.rows_topk_mask(a, k),
                           dtype, "exact")


def test_masked_softmax_blocks_scores_and_nan_mask_allows(put, dtype):
    s = np.array([[np.nan, 1.0, 2.0], [5.0, np.inf, 1.0], [1.0, 2.0, 3.0]])
    mask = np.array([[0, 1, 1], [1, 0, 1], [0, 0, 0]])
    y = bufkern.rows_masked_softmax(put(s, dtype), put(mask, dtype), rows=3, cols=3).numpy()
    bkref.assert_close(y, bkref.rows_masked_softmax(s, mask), dtype, "red", scale=1.0)
    assert (y[2] == 0).all() and not np.signbit(y[2]).any()
    y = bufkern.rows_masked_softmax(put([1.0, 2.0], dtype), put([np.nan, 0.0], dtype), rows=1, cols=2).numpy()
    bkref.assert_close(y, [1.0, 0.0], dtype, "exact")


def test_empty_cases(put, dtype):
    e = put(np.zeros(0), dtype)
    bkref.assert_close(bufkern.rows_sum(e, rows=3, cols=0).numpy(), [0, 0, 0], dtype, "exact")
    bkref.assert_close(bufkern.rows_max(e, rows=2, cols=0).numpy(), [0, 0], dtype, "exact")
    assert bufkern.rows_first_max_mask(e, rows=0, cols=4).length == 0
    assert bufkern.rows_topk_mask(e, rows=3, cols=0, k=1).length == 0
    assert bufkern.rows_masked_softmax(e, e, rows=0, cols=7).length == 0


def test_rejections(put, dtype):
    x = put(np.zeros(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="k = -1"):
        bufkern.rows_topk_mask(x, rows=2, cols=3, k=-1)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.rows_max(x, rows=3, cols=3)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.rows_masked_softmax(x, put(np.zeros(5), dtype), rows=2, cols=3)
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises(bufkern.DtypeError):
        bufkern.rows_masked_softmax(x, put(np.zeros(6), other), rows=2, cols=3)

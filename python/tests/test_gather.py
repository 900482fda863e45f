"""bufkern.rows_gather and rows_scatter_add (contract §3.11)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_spec_example(put, dtype):
    mat = put([[1, 2], [3, 4], [5, 6]], dtype)
    vals = put([[0.25, -0.5], [1, 1], [9, 9]], dtype)
    y = bufkern.rows_scatter_add(mat, vals, rows=3, cols=2, indices=[1, 1, 7])
    assert y.shape == (3, 2)
    bkref.assert_close(y.numpy(), [[1, 2], [4.25, 4.5], [5, 6]], dtype, "exact")


@pytest.mark.parametrize("index_kind", ["list", "uint64", "int32"])
def test_random(put, dtype, rng, index_kind):
    rows, cols, k = 40, 9, 70
    mat = rng.standard_normal((rows, cols)).astype(dtype)
    mat[3, 4] = np.nan  # a NaN row must not leak into zero rows
    idx = rng.integers(0, rows + 5, size=k)
    indices = {"list": idx.tolist(), "uint64": idx.astype(np.uint64), "int32": idx.astype(np.int32)}[index_kind]
    g = bufkern.rows_gather(put(mat, dtype), rows=rows, cols=cols, indices=indices)
    assert g.shape == (k, cols)
    got = g.numpy()
    bkref.assert_close(got, bkref.rows_gather(mat, rows, cols, idx), dtype, "exact")
    assert not np.signbit(got[idx >= rows]).any()
    vals = rng.standard_normal((k, cols)).astype(dtype)
    mat2 = rng.standard_normal((rows, cols)).astype(dtype)
    s = bufkern.rows_scatter_add(put(mat2, dtype), put(vals, dtype), rows=rows, cols=cols, indices=indices)
    ref = bkref.rows_scatter_add(mat2, vals, rows, cols, idx)
    absref = bkref.rows_scatter_add(np.abs(mat2), np.abs(vals), rows, cols, idx)
    bkref.assert_close(s.numpy(), ref, dtype, "red", scale=absref.max())


def test_empty_indices(put, dtype):
    mat = put(np.arange(6.0), dtype)
    assert bufkern.rows_gather(mat, rows=3, cols=2, indices=[]).length == 0
    assert bufkern.rows_gather(mat, rows=3, cols=2, indices=np.zeros(0, np.uint64)).shape == (0, 2)
    y = bufkern.rows_scatter_add(mat, put([], dtype), rows=3, cols=2, indices=[])
    bkref.assert_close(y.numpy(), np.arange(6.0), dtype, "exact")


def test_index_rejections(put, dtype):
    mat = put(np.arange(6.0), dtype)
    with pytest.raises(bufkern.InvalidArgumentError) as info:
        bufkern.rows_gather(mat, rows=3, cols=2, indices=[0, 1, 2, 2**32])
    assert "indices[3] = 4294967296" in info.value.message
    assert info.value.message.startswith("bk_rows_gather")
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.rows_gather(mat, rows=3, cols=2, indices=np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(bufkern.InvalidArgumentError, match="indices\\[1\\] = -2 is negative"):
        bufkern.rows_gather(mat, rows=3, cols=2, indices=[0, -2])
    with pytest.raises(bufkern.InvalidArgumentError, match="outside"):
        bufkern.rows_gather(mat, rows=3, cols=2, indices=[2**64])
    with pytest.raises(TypeError):
        bufkern.rows_gather(mat, rows=3, cols=2, indices=[0.5])
    with pytest.raises(bufkern.InvalidArgumentError, match="one-dimensional"):
        bufkern.rows_gather(mat, rows=3, cols=2, indices=[[0, 1]])
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.rows_scatter_add(mat, put(np.ones(3), dtype), rows=3, cols=2, indices=[0, 1])  # values (2, 2)

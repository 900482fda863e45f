"""Vectors, broadcasts and layout (contract §3.6)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_concat_and_slice(put, dtype, rng):
    a = rng.standard_normal(7)
    b = rng.standard_normal(5)
    y = bufkern.vec_concat(put(a, dtype), put(b, dtype), n=7, m=5)
    bkref.assert_close(y.numpy(), np.concatenate([a, b]).astype(dtype), dtype, "exact")
    s = bufkern.vec_slice(y, n=12, start=3, length=6)
    bkref.assert_close(s.numpy(), np.concatenate([a, b]).astype(dtype)[3:9], dtype, "exact")
    assert bufkern.vec_slice(y, n=12, start=12, length=0).length == 0
    assert bufkern.vec_concat(put([], dtype), put([], dtype), n=0, m=0).length == 0
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.vec_slice(y, n=12, start=10, length=3)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.vec_slice(y, n=12, start=2**62, length=2**62)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.vec_concat(put(a, dtype), put(b, dtype), n=7, m=4)


def test_broadcast_col(put, dtype):
    y = bufkern.broadcast_col(put([1, 2, 3], dtype), rows=3, cols=2)
    assert y.shape == (3, 2)
    bkref.assert_close(y.numpy(), [[1, 1], [2, 2], [3, 3]], dtype, "exact")
    assert bufkern.broadcast_col(put([1, 2], dtype), rows=2, cols=0).length == 0
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.broadcast_col(put([1, 2], dtype), rows=3, cols=2)


def test_broadcast_spec_example(put, dtype):
    x = put(np.arange(12.0), dtype)
    y = bufkern.broadcast_to(x, in_dims=[2, 1, 3, 2], out_dims=[2, 4, 3, 2], axis_map=[1, 2, 3, 4])
    assert y.shape == (2, 4, 3, 2)
    expected = np.concatenate([np.tile(np.arange(6.0), 4), np.tile(np.arange(6.0, 12.0), 4)])
    bkref.assert_close(y.numpy(), expected, dtype, "exact")
    d = bufkern.broadcast_to_adjoint(put(np.ones(48), dtype), in_dims=[2, 1, 3, 2], out_dims=[2, 4, 3, 2], axis_map=[1, 2, 3, 4])
    assert d.shape == (2, 1, 3, 2)
    bkref.assert_close(d.numpy(), np.full(12, 4.0), dtype, "exact")


BROADCASTS = [
    ((3,), (4, 3), (0, 1)),
    ((3, 1), (3, 5), (1, 2)),
    ((2, 3), (3, 4, 2), (2, 0, 1)),  # a permutation with an inserted axis
    ((1, 1), (2, 3), (1, 2)),
    ((4, 1, 2), (2, 3, 4, 5), (3, 0, 1, 2)),
]


@pytest.mark.parametrize("in_dims,out_dims,axis_map", BROADCASTS)
def test_broadcast_random(put, dtype, rng, in_dims, out_dims, axis_map):
    x = rng.standard_normal(in_dims)
    y = bufkern.broadcast_to(put(x, dtype), in_dims=in_dims, out_dims=out_dims, axis_map=axis_map)
    bkref.assert_close(y.numpy(), bkref.broadcast_to(x.astype(dtype), in_dims, out_dims, axis_map),
                       dtype, "exact")
    g = rng.standard_normal(out_dims)
    d = bufkern.broadcast_to_adjoint(put(g, dtype), in_dims=in_dims, out_dims=out_dims, axis_map=axis_map)
    bkref.assert_close(d.numpy(), bkref.broadcast_to_adjoint(g.astype(dtype), in_dims, out_dims, axis_map),
                       dtype, "red", scale=bkref.broadcast_to_adjoint(np.abs(g), in_dims, out_dims, axis_map).max())


def test_broadcast_rejections(put, dtype):
    x = put(np.zeros(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.broadcast_to(x, in_dims=[2, 3], out_dims=[2, 4], axis_map=[1, 2])  # 3 is neither 1 nor 4
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.broadcast_to(x, in_dims=[2, 3], out_dims=[2, 3], axis_map=[1, 1])  # an axis used twice
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.broadcast_to(x, in_dims=[2, 3], out_dims=[2, 3], axis_map=[1, 3])  # an entry above in_rank
    with pytest.raises(bufkern.InvalidArgumentError, match="axis_map has 1 entries"):
        bufkern.broadcast_to(x, in_dims=[2, 3], out_dims=[2, 3], axis_map=[1])
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.broadcast_to_adjoint(x, in_dims=[2, 3], out_dims=[2, 3, 2], axis_map=[1, 2, 0])  # dout is not 12 long


def test_swap_adjacent(put, dtype, rng):
    y = bufkern.swap_adjacent(put(np.arange(24.0), dtype), dims=[2, 3, 4], depth=1)
    assert y.shape == (2, 4, 3)
    bkref.assert_close(y.numpy(), [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17, 21,
                                   14, 18, 22, 15, 19, 23], dtype, "exact")
    for dims, depth in (((5, 7), 0), ((3, 4, 5, 6), 0), ((3, 4, 5, 6), 2), ((2, 1, 9), 1)):
        x = rng.standard_normal(dims).astype(dtype)
        got = bufkern.swap_adjacent(put(x, dtype), dims=dims, depth=depth).numpy()
        bkref.assert_close(got, np.swapaxes(x, depth, depth + 1), dtype, "exact")
    with pytest.raises(bufkern.InvalidArgumentError, match="depth"):
        bufkern.swap_adjacent(put(np.arange(24.0), dtype), dims=[2, 3, 4], depth=2)
    assert bufkern.swap_adjacent(put([], dtype), dims=[0, 3], depth=0).length == 0


def test_sum_axis(put, dtype, rng):
    y = bufkern.sum_axis(put(np.arange(24.0), dtype), dims=[2, 3, 4], axis=2)
    assert y.shape == (2, 3)
    bkref.assert_close(y.numpy(), [6, 22, 38, 54, 70, 86], dtype, "exact")
    for dims, axis in (((5, 7), 0), ((5, 7), 1), ((3, 4, 5, 6), 1), ((1000,), 0)):
        x = rng.standard_normal(dims)
        got = bufkern.sum_axis(put(x, dtype), dims=dims, axis=axis).numpy()
        bkref.assert_close(got, x.astype(dtype).astype(np.float64).sum(axis), dtype, "red",
                           scale=np.abs(x).sum(axis).max())
    scalar = bufkern.sum_axis(put([2.5], dtype), dims=[], axis=0)
    assert scalar.item() == 2.5
    bkref.assert_close(bufkern.sum_axis(put([], dtype), dims=[3, 0], axis=1).numpy(), [0, 0, 0], dtype, "exact")
    with pytest.raises(bufkern.InvalidArgumentError, match="axis"):
        bufkern.sum_axis(put(np.arange(6.0), dtype), dims=[2, 3], axis=2)

"""Buffers: numpy conversion, shapes, lifetime, copies."""

import gc
import sys

import numpy as np
import pytest

import bufkern


def test_round_trip_keeps_dtype_shape_and_values(put, dtype, rng):
    a = rng.standard_normal((3, 4, 5)).astype(dtype)
    b = put(a, dtype)
    assert b.dtype == dtype and b.length == 60 and len(b) == 3
    assert b.shape == (3, 4, 5) and b.ndim == 3
    assert b.nbytes == 60 * np.dtype(dtype).itemsize
    out = b.numpy()
    assert out.dtype == dtype and out.shape == (3, 4, 5)
    np.testing.assert_array_equal(out, a)
    assert out.flags.writeable


def test_from_numpy_copies(ctx):
    a = np.arange(4.0)
    b = bufkern.from_numpy(a, ctx=ctx)
    a[0] = 100.0
    assert b.numpy()[0] == 0.0


def test_non_contiguous_input_is_copied_in_order(ctx):
    a = np.arange(12.0).reshape(3, 4).T
    b = bufkern.from_numpy(a, ctx=ctx)
    np.testing.assert_array_equal(b.numpy(), a)


def test_dtypes_and_conversion(ctx):
    assert bufkern.from_numpy(np.arange(3), ctx=ctx).dtype == np.float64  # integers become float64
    with pytest.raises(bufkern.DtypeError, match="complex128"):
        bufkern.from_numpy(np.ones(3, complex), ctx=ctx)
    b = bufkern.from_numpy(np.arange(3), dtype="float32", ctx=ctx)
    assert b.dtype == np.float32
    assert bufkern.from_numpy([1, 2, 3], ctx=ctx).dtype == np.float64
    assert bufkern.from_numpy([1.5], dtype=np.float32, ctx=ctx).dtype == np.float32
    with pytest.raises(bufkern.DtypeError):
        bufkern.from_numpy([1.0], dtype="int8", ctx=ctx)


def test_zeros(ctx):
    z = bufkern.zeros((2, 3), dtype="float64", ctx=ctx)
    assert z.shape == (2, 3) and z.dtype == np.float64
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3)))
    assert bufkern.zeros(5, ctx=ctx).dtype == np.float32
    with pytest.raises(bufkern.DtypeError) as info:
        bufkern.zeros(4, dtype="bfloat16", ctx=ctx)
    assert info.value.status == 101
    with pytest.raises(bufkern.InvalidArgumentError, match="negative"):
        bufkern.zeros(-3, ctx=ctx)


def test_empty_and_scalar_buffers(ctx, dtype):
    e = bufkern.from_numpy(np.zeros((0, 4), dtype), ctx=ctx)
    assert e.length == 0 and e.shape == (0, 4) and e.data_ptr == 0
    assert e.numpy().shape == (0, 4)
    s = bufkern.from_numpy(np.array(2.5, dtype), ctx=ctx)
    assert s.shape == () and s.item() == 2.5 and float(s) == 2.5
    with pytest.raises(ValueError):
        bufkern.from_numpy(np.zeros(2, dtype), ctx=ctx).item()


def test_retain_and_close(ctx):
    b = bufkern.from_numpy(np.arange(5.0), ctx=ctx)
    c = b.retain()
    b.close()
    assert b.closed and not c.closed
    b.close()  # a second close is a no-op
    with pytest.raises(ValueError, match="closed"):
        b.numpy()
    with pytest.raises(ValueError, match="closed"):
        bufkern.rows_sum(b, rows=1, cols=5)
    np.testing.assert_array_equal(c.numpy(), np.arange(5.0))
    with c:
        pass
    assert c.closed
    assert "closed" in repr(c)


def test_collected_buffers_release_their_memory(ctx):
    # A buffer imported from numpy holds a reference to the array until the
    # last bufkern reference goes: this observes the release path.
    a = np.arange(8.0)
    base = sys.getrefcount(a)
    b = bufkern.from_dlpack(a)
    c = b.retain()
    assert sys.getrefcount(a) > base
    del b
    gc.collect()
    assert sys.getrefcount(a) > base
    del c
    gc.collect()
    assert sys.getrefcount(a) == base


def test_reshape_is_a_hint_on_the_same_memory(ctx):
    b = bufkern.from_numpy(np.arange(12.0), ctx=ctx)
    r = b.reshape(3, 4)
    assert r.shape == (3, 4) and b.shape == (12,)
    assert r.data_ptr == b.data_ptr
    assert b.reshape((2, -1)).shape == (2, 6)
    np.testing.assert_array_equal(r.numpy(), np.arange(12.0).reshape(3, 4))
    with pytest.raises(bufkern.InvalidArgumentError):
        b.reshape(5, 3)


def test_copy_and_cpu(ctx):
    b = bufkern.from_numpy(np.arange(6.0).reshape(2, 3), ctx=ctx)
    c = b.copy(ctx)
    assert c.data_ptr != b.data_ptr and c.shape == (2, 3)
    np.testing.assert_array_equal(c.numpy(), b.numpy())
    h = b.cpu()
    assert h.device == "cpu"
    np.testing.assert_array_equal(h.numpy(), np.arange(6.0).reshape(2, 3))


def test_buffers_are_not_built_directly():
    with pytest.raises(TypeError):
        bufkern.Buffer()


def test_numpy_view_without_copy():
    b = bufkern.from_numpy(np.arange(6.0).reshape(2, 3))
    v = b.numpy(copy=False)
    assert v.shape == (2, 3) and not v.flags.writeable
    assert v.__array_interface__["data"][0] == b.data_ptr
    b.close()
    np.testing.assert_array_equal(v, np.arange(6.0).reshape(2, 3))  # the view keeps it alive


def test_primitives_accept_array_likes(ctx):
    y = bufkern.rows_sum([[1.0, 2.0], [3.0, 4.0]], rows=2, cols=2, ctx=ctx)
    np.testing.assert_array_equal(y.numpy(), [3.0, 7.0])
    a = np.array([[1.0, 5.0]], np.float32)
    np.testing.assert_array_equal(bufkern.rows_max(a, rows=1, cols=2, ctx=ctx).numpy(), [5.0])
    with pytest.raises(TypeError):
        bufkern.rows_sum(object(), rows=1, cols=1, ctx=ctx)


def test_inputs_are_not_written(put, dtype, rng):
    a = rng.standard_normal((4, 5)).astype(dtype)
    x = put(a, dtype)
    bufkern.softmax(x, dims=(4, 5), axis=1)
    bufkern.rows_topk_mask(x, rows=4, cols=5, k=2)
    bufkern.layernorm_forward(x, put(np.ones(5), dtype), put(np.zeros(5), dtype), rows=4, cols=5)
    np.testing.assert_array_equal(x.numpy(), a)

"""bufkern.softmax (contract §3.1)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_spec_example(put, dtype):
    x = put([[0.10, -0.20, 0.30], [0.05, 0.25, -0.15]], dtype)
    y = bufkern.softmax(x, dims=[2, 3], axis=1)
    assert y.shape == (2, 3) and y.dtype == dtype
    bkref.assert_example(y.numpy(), [[0.3375845, 0.2500888, 0.4123267],
                                     [0.3289329, 0.4017596, 0.2693075]], dtype)


@pytest.mark.parametrize("dims,axis", [((7, 33), 1), ((5, 6, 7), 1), ((4, 3, 9), 0), ((1000,), 0),
                                       ((3, 2, 4, 5), 3)])
def test_random(put, dtype, rng, dims, axis):
    a = rng.standard_normal(dims) * 4
    y = bufkern.softmax(put(a, dtype), dims=dims, axis=axis)
    bkref.assert_close(y.numpy(), bkref.softmax(a.astype(dtype), axis), dtype, "red", scale=1.0)


def test_ieee_cases(put, dtype):
    a = np.array([[np.nan, 1.0], [np.inf, 0.0], [-np.inf, -np.inf], [-np.inf, 2.0]])
    y = bufkern.softmax(put(a, dtype), dims=(4, 2), axis=1).numpy()
    assert np.isnan(y[:3]).all()
    np.testing.assert_array_equal(y[3], [0.0, 1.0])


def test_empty(put, dtype):
    y = bufkern.softmax(put(np.zeros((3, 0)), dtype), dims=(3, 0), axis=1)
    assert y.length == 0


def test_rejections(put, dtype):
    x = put(np.zeros(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="axis"):
        bufkern.softmax(x, dims=(2, 3), axis=2)
    with pytest.raises(bufkern.InvalidArgumentError, match="rank"):
        bufkern.softmax(x, dims=(), axis=0)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.softmax(x, dims=(2, 4), axis=1)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.softmax(x, dims=[1] * 17, axis=0)

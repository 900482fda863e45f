"""bufkern.conv (contract §3.4)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_spec_example(put, dtype):
    x = put([[1, 2, 3, 4], [10, 20, 30, 40]], dtype)
    w = put([[[1, -1], [100, 100]], [[7, 7], [0.5, 2]]], dtype)
    bias = put([0, 1], dtype)
    y = bufkern.conv(x, w, bias, input_dims=[2, 4], kernel_dims=[2, 2, 2], stride=[1],
                     pad_before=[1], pad_after=[0], dilation=[2], groups=2)
    assert y.shape == (1, 2, 3)
    bkref.assert_example(y.numpy(), [-2, -2, -2, 41, 66, 91], dtype)


CASES = [
    # input_dims, kernel_dims, stride, pad_before, pad_after, dilation, groups
    ((2, 4, 11), (6, 4, 3), (1,), (1,), (2,), (1,), 2),
    ((3, 2, 9, 8), (4, 2, 3, 2), (2, 1), (1, 0), (0, 2), (1, 2), 1),
    ((1, 8, 7, 7), (8, 8, 3, 3), (1, 1), (2, 1), (1, 2), (2, 1), 8),
    ((2, 2, 4, 5, 6), (2, 2, 2, 2, 3), (1, 2, 1), (0, 1, 1), (1, 0, 1), (1, 1, 2), 1),
    ((4, 13), (2, 4, 4), (3,), (3,), (0,), (1,), 1),
]


@pytest.mark.parametrize("case", CASES, ids=[f"r{len(c[1]) - 2}_{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "nobias"])
def test_random(put, dtype, rng, case, with_bias):
    in_dims, k_dims, stride, pb, pa, dil, groups = case
    x = rng.standard_normal(in_dims).astype(dtype)
    w = rng.standard_normal(k_dims).astype(dtype)
    b = rng.standard_normal(k_dims[0]).astype(dtype) if with_bias else None
    y = bufkern.conv(put(x, dtype), put(w, dtype), put(b, dtype) if with_bias else None,
                     input_dims=in_dims, kernel_dims=k_dims, stride=stride, pad_before=pb, pad_after=pa, dilation=dil, groups=groups)
    ref = bkref.conv(x, w, b, in_dims, k_dims, stride, pb, pa, dil, groups)
    assert y.shape == ref.shape
    absref = bkref.conv(np.abs(x), np.abs(w), np.abs(b) if with_bias else None, in_dims, k_dims,
                        stride, pb, pa, dil, groups)
    n = int(np.prod(k_dims[1:])) // groups
    bkref.assert_close(y.numpy(), ref, dtype, "contract", scale=absref.max(), n=n)


def test_defaults_and_empty_output(put, dtype):
    x = put(np.arange(5.0), dtype)
    w = put([[[1.0, 1.0]]], dtype)
    y = bufkern.conv(x, w, None, input_dims=[1, 5], kernel_dims=[1, 1, 2])
    bkref.assert_close(y.numpy(), [1, 3, 5, 7], dtype, "exact")
    e = bufkern.conv(x, put(np.ones(6), dtype), None, input_dims=[1, 5], kernel_dims=[1, 1, 6])
    assert e.length == 0


def test_rejections(put, dtype):
    x = put(np.zeros(8), dtype)
    w = put(np.zeros(4), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="groups"):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2, 1], groups=0)
    with pytest.raises(bufkern.InvalidArgumentError, match="stride"):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2, 1], stride=[0])
    with pytest.raises(bufkern.InvalidArgumentError, match="stride has 2 entries"):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2, 1], stride=[1, 1])
    with pytest.raises(bufkern.InvalidArgumentError, match="spatial_rank"):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2])
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2, 1], pad_before=[-1])
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.conv(x, w, None, input_dims=[2, 4], kernel_dims=[2, 2, 1], groups=3)

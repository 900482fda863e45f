"""bufkern.bmm and bufkern.bmm_scaled (contract §3.8)."""

import numpy as np
import pytest

import bkref
import bufkern


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("batch,m,n,p", [(3, 5, 7, 4), (1, 1, 33, 1), (2, 16, 1, 9)])
def test_random(put, dtype, rng, trans_a, trans_b, batch, m, n, p):
    a = rng.standard_normal((batch, n, m) if trans_a else (batch, m, n)).astype(dtype)
    b = rng.standard_normal((batch, p, n) if trans_b else (batch, n, p)).astype(dtype)
    y = bufkern.bmm(put(a, dtype), put(b, dtype), batch=batch, m=m, n=n, p=p, trans_a=trans_a, trans_b=trans_b)
    assert y.shape == (batch, m, p)
    ref, absref = bkref.bmm(a, b, batch, m, n, p, trans_a, trans_b)
    bkref.assert_close(y.numpy(), ref, dtype, "contract", scale=absref.max(), n=n)
    z, loss = bufkern.bmm_scaled(put(a, dtype), put(b, dtype), batch=batch, m=m, n=n, p=p, trans_a=trans_a, trans_b=trans_b,
                                 scale=0.375)
    assert isinstance(loss, bool)
    bkref.assert_close(z.numpy(), 0.375 * ref, dtype, "contract", scale=0.375 * absref.max(), n=n)


def test_scaled_spec_example_and_flag(put, dtype):
    a = put([[1e30]], dtype)
    y, loss = bufkern.bmm_scaled(a, a, batch=1, m=1, n=1, p=1, scale=1e-30)
    bkref.assert_example(y.numpy(), [1e30], dtype)
    assert loss is False
    # A zero result entry is below the smallest normal: the flag asks for a replay.
    _, loss = bufkern.bmm_scaled(put([[1.0, 1.0]], dtype), put([[1.0], [-1.0]], dtype), batch=1, m=1, n=2, p=1)
    assert loss is True
    _, loss = bufkern.bmm_scaled(put([[np.inf]], dtype), put([[1.0]], dtype), batch=1, m=1, n=1, p=1)
    assert loss is True
    _, loss = bufkern.bmm_scaled(put([], dtype), put([], dtype), batch=0, m=1, n=1, p=1)
    assert loss is False


def test_zero_inner_dimension_gives_zeros(put, dtype):
    y = bufkern.bmm(put([], dtype), put([], dtype), batch=2, m=3, n=0, p=2)
    bkref.assert_close(y.numpy(), np.zeros((2, 3, 2)), dtype, "exact")
    assert bufkern.bmm(put([], dtype), put([], dtype), batch=0, m=3, n=4, p=2).length == 0


def test_rejections(put, dtype):
    a = put(np.ones(6), dtype)
    with pytest.raises(bufkern.InvalidArgumentError, match="trans_a"):
        bufkern.bmm(a, a, batch=1, m=2, n=3, p=2, trans_a=2)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.bmm(a, a, batch=1, m=2, n=3, p=3)
    with pytest.raises(bufkern.InvalidArgumentError, match="scale"):
        bufkern.bmm_scaled(a, a, batch=1, m=2, n=3, p=2, scale=0.0)
    with pytest.raises(bufkern.InvalidArgumentError, match="scale"):
        bufkern.bmm_scaled(a, a, batch=1, m=2, n=3, p=2, scale=float("inf"))
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.bmm(a, a, batch=2**40, m=2**40, n=1, p=1)

"""bufkern.rfft, irfft, irfft_unnormalized (contract §3.9)."""

import numpy as np
import pytest

import bkref
import bufkern


def test_spec_example(put, dtype):
    spec = bufkern.rfft(put([1, 0, 0, 0, 1, 2, 3, 4], dtype), batch=2, n=4)
    assert spec.shape == (2, 3, 2)
    bkref.assert_example(spec.numpy(), [1, 0, 1, 0, 1, 0, 10, 0, -2, 2, -2, 0], dtype)
    s = put([10, 0, -2, 2, -2, 0], dtype)
    bkref.assert_example(bufkern.irfft(s, batch=1, n=4).numpy(), [1, 2, 3, 4], dtype)
    bkref.assert_example(bufkern.irfft_unnormalized(s, batch=1, n=4).numpy(), [4, 8, 12, 16], dtype)


@pytest.mark.parametrize("batch,n", [(3, 16), (2, 15), (4, 17), (1, 1), (2, 2), (1, 1000), (2, 97)])
def test_random(put, dtype, rng, batch, n):
    x = rng.standard_normal((batch, n)).astype(dtype)
    spec = bufkern.rfft(put(x, dtype), batch=batch, n=n).numpy()
    scale = np.abs(x).sum(1).max()
    bkref.assert_close(spec, bkref.rfft(x, batch, n), dtype, "contract", scale=scale, n=n)
    s = rng.standard_normal((batch, n // 2 + 1, 2)).astype(dtype)
    sscale = 2 * np.abs(s).sum((1, 2)).max()
    got = bufkern.irfft(put(s, dtype), batch=batch, n=n).numpy()
    bkref.assert_close(got, bkref.irfft(s, batch, n), dtype, "contract", scale=sscale / n, n=n)
    got = bufkern.irfft_unnormalized(put(s, dtype), batch=batch, n=n).numpy()
    bkref.assert_close(got, bkref.irfft(s, batch, n, normalized=False), dtype, "contract",
                       scale=sscale, n=n)
    back = bufkern.irfft(bufkern.rfft(put(x, dtype), batch=batch, n=n), batch=batch, n=n).numpy()
    bkref.assert_close(back, x, dtype, "contract", scale=scale, n=n)


def test_empty_and_rejections(put, dtype):
    assert bufkern.rfft(put([], dtype), batch=0, n=8).length == 0
    assert bufkern.irfft(put([], dtype), batch=0, n=8).length == 0
    with pytest.raises(bufkern.InvalidArgumentError, match="n"):
        bufkern.rfft(put([], dtype), batch=1, n=0)
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.irfft(put(np.zeros(6), dtype), batch=1, n=6)  # needs 4 bins * 2
    with pytest.raises(bufkern.InvalidArgumentError):
        bufkern.irfft_unnormalized(put(np.zeros(6), dtype), batch=1, n=0)

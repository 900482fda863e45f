"""The stream convention with PyTorch on its default stream.

PyTorch reports its default stream as 0 (``torch.cuda.current_stream()
.cuda_stream``), and NULL is CUDA's legacy default stream for bufkern as for
cuBLAS, cuFFT and cuDNN. A context bound with ``ctx.set_stream(0)`` therefore
queues its work after whatever PyTorch queued on that stream: a bufkern call
issued right after a PyTorch producer reads the producer's finished data,
with no synchronization by the caller.
"""

import numpy as np
import pytest

import bufkern

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or bufkern.cuda_device_count() == 0,
    reason="needs PyTorch with CUDA and a bufkern build with a GPU",
)

N = 1 << 22


def _bound_to_torch_stream():
    ctx = bufkern.Context("cuda:0")
    handle = torch.cuda.current_stream(torch.device("cuda:0")).cuda_stream
    assert handle == 0  # torch's default stream
    ctx.set_stream(handle)
    return ctx


@pytest.mark.parametrize("producer", ["copy", "cumsum"])
def test_call_after_torch_producer_reads_finished_data(producer):
    dev = torch.device("cuda:0")
    ctx = _bound_to_torch_stream()
    x = torch.zeros(N, dtype=torch.float32, device=dev)
    ones = torch.ones(N, dtype=torch.float32, device=dev)
    torch.cuda.synchronize(dev)
    # Imported while nothing is pending on x: the import itself orders nothing.
    b = bufkern.from_dlpack(x)
    # The producer: queued behind a long sleep on torch's default stream, so
    # a bufkern call on any other stream would run first and read zeros.
    torch.cuda._sleep(50_000_000)
    if producer == "copy":
        x.copy_(ones)
        want = float(N)
    else:
        # x[i] = i + 1 for i < 1024, exact in float32; the rest stays 0.
        torch.cumsum(ones[:1024], 0, out=x[:1024])
        want = 1024.0 * 1025.0 / 2.0
    s = bufkern.rows_sum(b, rows=1, cols=N, ctx=ctx)
    got = s.numpy()
    assert got.shape == (1,)
    assert got[0] == np.float32(want)
    ctx.close()

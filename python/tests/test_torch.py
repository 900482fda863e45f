"""DLPack interchange with PyTorch: zero copies both ways, on the CPU and, with
BK_TEST_DEVICE=cuda:N and a CUDA torch, on the GPU with stream ordering.

Skipped as a whole (with the reason shown by `pytest -rs`) when torch is not
importable, unless BK_TEST_REQUIRE_TORCH=1 makes that a failure.
"""

import gc
import os

import numpy as np
import pytest

import bkref
import bufkern

if os.environ.get("BK_TEST_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip(
        "torch", reason="torch is not importable (BK_TEST_REQUIRE_TORCH=1 turns this into a failure)"
    )

DEVICE = os.environ.get("BK_TEST_DEVICE", "cpu").strip() or "cpu"
CUDA = DEVICE.startswith("cuda") and torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not CUDA, reason="needs BK_TEST_DEVICE=cuda:N and torch.cuda.is_available()"
)
TORCH_DTYPES = {np.float32: torch.float32, np.float64: torch.float64}


@pytest.fixture(autouse=True)
def _no_tf32():
    if hasattr(torch.backends, "cuda"):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        yield
        torch.backends.cuda.matmul.allow_tf32 = old
    else:
        yield


# ---- CPU -----------------------------------------------------------------------


def _torch_reads_dlpack_1():
    """Whether torch asks producers for DLPack 1.0, so that read-only exports
    can share memory with it; older versions get copies of their own."""
    b = bufkern.from_numpy(np.zeros(2))
    return torch.from_dlpack(b).data_ptr() == b.data_ptr


TORCH_DLPACK_1 = _torch_reads_dlpack_1()


def test_torch_from_buffer_keeps_the_shape_and_the_buffer(dtype, rng):
    a = rng.standard_normal((3, 4)).astype(dtype)
    b = bufkern.from_numpy(a)
    t = torch.from_dlpack(b)
    assert t.dtype == TORCH_DTYPES[dtype] and t.shape == (3, 4) and t.device.type == "cpu"
    assert (t.data_ptr() == b.data_ptr) == TORCH_DLPACK_1
    np.testing.assert_array_equal(t.numpy(), a)
    if not TORCH_DLPACK_1:
        t.add_(1.0)  # its own copy: the immutable buffer is unchanged
        np.testing.assert_array_equal(b.numpy(), a)


def test_primitives_take_any_torch_tensor(dtype):
    tdt = TORCH_DTYPES[dtype]
    x = torch.arange(12, dtype=tdt).reshape(3, 4)
    got = bufkern.rows_sum(x.t())  # transposed: copied into a compact buffer
    np.testing.assert_array_equal(got.numpy(), x.t().sum(-1).numpy())
    ints = bufkern.rows_sum(torch.arange(6).reshape(2, 3))  # integers: float64
    assert ints.dtype == np.float64 and ints.numpy().tolist() == [3.0, 12.0]
    w = torch.ones(3, 4, dtype=tdt, requires_grad=True)
    assert bufkern.rows_sum(w).numpy().tolist() == [4.0] * 3
    with pytest.raises(bufkern.DtypeError, match="float16"):
        bufkern.rows_sum(torch.ones(2, 2, dtype=torch.float16))
    assert bufkern.zeros(2, torch.float32).dtype == np.float32
    assert bufkern.softmax([1.0, 2.0], ctx=torch.device("cpu")).device == "cpu"


def test_buffer_from_torch_shares_memory(dtype):
    t = torch.arange(12, dtype=TORCH_DTYPES[dtype]).reshape(3, 4)
    b = bufkern.from_dlpack(t)
    assert b.data_ptr == t.data_ptr() and b.shape == (3, 4) and b.dtype == dtype
    np.testing.assert_array_equal(b.numpy(), t.numpy())


def test_primitive_on_torch_tensors_matches_torch(dtype):
    x = torch.randn(16, 40, dtype=TORCH_DTYPES[dtype])
    y = torch.from_dlpack(bufkern.softmax(x, dims=(16, 40), axis=1)).view(16, 40)
    bkref.assert_close(y.numpy(), torch.softmax(x.double(), 1).numpy(), dtype, "red", scale=1.0)
    a, b = torch.randn(3, 5, 7, dtype=TORCH_DTYPES[dtype]), torch.randn(3, 7, 4, dtype=TORCH_DTYPES[dtype])
    c = torch.from_dlpack(bufkern.bmm(a, b, batch=3, m=5, n=7, p=4)).view(3, 5, 4)
    ref = torch.bmm(a.double(), b.double()).numpy()
    scale = torch.bmm(a.double().abs(), b.double().abs()).max().item()
    bkref.assert_close(c.numpy(), ref, dtype, "contract", scale=scale, n=7)


def test_lifetimes_cross_the_boundary():
    b = bufkern.from_numpy(np.arange(5.0))
    t = torch.from_dlpack(b)
    b.close()
    gc.collect()
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    src = torch.arange(4.0)
    buf = bufkern.from_dlpack(src)
    del src
    gc.collect()
    np.testing.assert_array_equal(buf.numpy(), np.arange(4.0))


def test_torch_rejections():
    with pytest.raises(bufkern.InvalidArgumentError, match="strides"):
        bufkern.from_dlpack(torch.arange(12.0).reshape(3, 4).t())
    with pytest.raises(bufkern.DtypeError):
        bufkern.from_dlpack(torch.arange(4, dtype=torch.int32))
    with pytest.raises(bufkern.DtypeError):
        bufkern.from_dlpack(torch.zeros(4, dtype=torch.float16))


# ---- CUDA --------------------------------------------------------------------------


def _gpu():
    return torch.device(DEVICE)


@needs_cuda
@pytest.mark.parametrize("mode", ["bound", "own_stream", "default"])
def test_cuda_round_trip(dtype, mode):
    tdt = TORCH_DTYPES[dtype]
    ctx = None
    if mode != "default":
        ctx = bufkern.Context(DEVICE)
        if mode == "bound":
            ctx.set_stream(torch.cuda.current_stream().cuda_stream)
    x = torch.empty(256, 1000, dtype=tdt, device=_gpu())
    torch.cuda._sleep(20_000_000)  # keep torch's stream busy: ordering must hold
    x.copy_(torch.randn(256, 1000, dtype=tdt, device=_gpu()))
    b = bufkern.from_dlpack(x, ctx=ctx)
    assert b.data_ptr == x.data_ptr() and b.device == f"cuda:{_gpu().index or 0}"
    y = bufkern.softmax(b, dims=(256, 1000), axis=1, ctx=ctx)
    t = torch.from_dlpack(y).view(256, 1000)
    assert t.device.type == "cuda" and (t.data_ptr() == y.data_ptr) == TORCH_DLPACK_1
    ref = torch.softmax(x.double(), 1)
    bkref.assert_close(t.double().cpu().numpy(), ref.cpu().numpy(), dtype, "red", scale=1.0)
    if ctx is not None:
        ctx.close()


@needs_cuda
def test_cuda_side_stream(dtype):
    tdt = TORCH_DTYPES[dtype]
    s = torch.cuda.Stream(device=_gpu())
    with torch.cuda.stream(s):
        ctx = bufkern.Context(DEVICE)
        ctx.set_stream(s.cuda_stream)
        a = torch.randn(8, 64, 32, dtype=tdt, device=_gpu())
        bm = torch.randn(8, 32, 48, dtype=tdt, device=_gpu())
        c = torch.from_dlpack(bufkern.bmm(a, bm, batch=8, m=64, n=32, p=48, ctx=ctx)).view(8, 64, 48)
        ref = torch.bmm(a.double(), bm.double())
        scale = torch.bmm(a.double().abs(), bm.double().abs()).max().item()
        s.synchronize()
    bkref.assert_close(c.double().cpu().numpy(), ref.cpu().numpy(), dtype, "contract", scale=scale, n=32)
    ctx.close()


@needs_cuda
def test_cuda_primitives_through_torch(dtype):
    tdt = TORCH_DTYPES[dtype]
    ctx = bufkern.Context(DEVICE)
    ctx.set_stream(torch.cuda.current_stream().cuda_stream)
    x = torch.randn(64, 300, dtype=tdt, device=_gpu())
    g = torch.randn(300, dtype=tdt, device=_gpu())
    beta = torch.randn(300, dtype=tdt, device=_gpu())
    out, norm, inv = bufkern.layernorm_forward(x, g, beta, rows=64, cols=300, eps=1e-5, ctx=ctx)
    ref = torch.nn.functional.layer_norm(x.double(), (300,), g.double(), beta.double(), 1e-5)
    got = torch.from_dlpack(out).view(64, 300).double().cpu().numpy()
    n64 = torch.from_dlpack(norm).double().cpu().numpy()
    scale = (np.abs(n64).reshape(64, 300) * g.abs().double().cpu().numpy() + beta.abs().double().cpu().numpy()).max()
    bkref.assert_close(got, ref.cpu().numpy(), dtype, "red", scale=scale)
    idx = torch.randint(0, 70, (50,)).numpy().astype(np.uint64)
    m = torch.randn(64, 300, dtype=tdt, device=_gpu())
    gat = torch.from_dlpack(bufkern.rows_gather(m, rows=64, cols=300, indices=idx, ctx=ctx)).view(50, 300).cpu().numpy()
    bkref.assert_close(gat, bkref.rows_gather(m.cpu().numpy(), 64, 300, idx), dtype, "exact")
    ctx.close()


@needs_cuda
def test_cuda_buffer_to_numpy_through_torch():
    ctx = bufkern.Context(DEVICE)
    b = bufkern.from_numpy(np.arange(10.0), ctx=ctx)
    t = torch.from_dlpack(b)
    assert t.device.type == "cuda"
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(10.0))
    np.testing.assert_array_equal(b.numpy(), np.arange(10.0))
    ctx.close()

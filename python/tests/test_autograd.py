"""bufkern.torch: every autograd Function against a float64 torch reference
(forward values) and torch.autograd.gradcheck (backward), on the CPU and, with
BK_TEST_DEVICE=cuda:N and a CUDA torch, on the GPU on torch's current stream;
plus the training example, which must reduce its loss.

Skipped as a whole when torch is not importable, unless BK_TEST_REQUIRE_TORCH=1
makes that a failure.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bufkern

from conftest import DEVICE

if os.environ.get("BK_TEST_REQUIRE_TORCH") == "1":
    import bufkern.torch as bkt
else:
    bkt = pytest.importorskip(
        "bufkern.torch", reason="torch is not importable (BK_TEST_REQUIRE_TORCH=1 turns this into a failure)"
    )
import torch  # noqa: E402  (importable once bufkern.torch is)

CUDA = DEVICE.startswith("cuda") and torch.cuda.is_available()
DEVICES = ["cpu", DEVICE] if CUDA else ["cpu"]
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs BK_TEST_DEVICE=cuda:N and torch.cuda.is_available()")
F64 = torch.float64
PYTHON_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture(params=DEVICES)
def dev(request):
    return torch.device(request.param)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(20261129)


def rand(gen, dev, *shape, positive=False):
    """A float64 leaf tensor on dev that requires grad."""
    if positive:
        t = torch.rand(shape, generator=gen, dtype=F64) + 0.5
    else:
        t = torch.randn(shape, generator=gen, dtype=F64)
    return t.to(dev).requires_grad_()


def check(fn, inputs, reference, atol=1e-12):
    """fn(*inputs) equals reference(*inputs) (float64 torch) and passes gradcheck."""
    got, want = fn(*inputs), reference(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype and got.device == want.device
    torch.testing.assert_close(got, want, rtol=1e-10, atol=atol)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


# ---- import --------------------------------------------------------------------------


def test_bufkern_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.path.insert(0, sys.argv[1])\n"
        "import bufkern\n"
        "assert 'bufkern.torch' not in sys.modules\n"
        "print(bufkern.softmax([[0.0, 0.0]], dims=(1, 2), axis=1).numpy().tolist())\n"
        "try:\n"
        "    import bufkern.torch\n"
        "except ImportError:\n"
        "    print('no torch')\n"
    )
    package_parent = str(Path(bufkern.__file__).resolve().parent.parent)  # the bufkern under test
    done = subprocess.run([sys.executable, "-c", code, package_parent], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[[0.5, 0.5]]", "no torch"]


# ---- softmax -----------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(dev, gen, dim):
    x = rand(gen, dev, 3, 4, 5)
    check(lambda x: bkt.softmax(x, dim=dim), (x,), lambda x: torch.softmax(x, dim))


def test_masked_softmax(dev, gen):
    scores = rand(gen, dev, 2, 3, 5)
    mask = torch.rand(2, 3, 5, generator=gen) > 0.4
    mask[1, 2] = False  # a row with no allowed entry is all zeros
    mask[0, 0] = True
    mask = mask.to(dev)

    def reference(s):
        y = torch.softmax(s.masked_fill(~mask, -float("inf")), -1)
        return torch.where(mask, y, torch.zeros_like(y))

    check(lambda s: bkt.masked_softmax(s, mask), (scores,), reference)
    assert (bkt.masked_softmax(scores, mask.to(F64))[1, 2] == 0).all()


# ---- layer norm, cross-entropies ------------------------------------------------------------


def test_layer_norm(dev, gen):
    x, gamma, beta = rand(gen, dev, 2, 3, 6), rand(gen, dev, 6), rand(gen, dev, 6)
    check(
        lambda x, g, b: bkt.layer_norm(x, g, b, eps=1e-3),
        (x, gamma, beta),
        lambda x, g, b: torch.nn.functional.layer_norm(x, (6,), g, b, eps=1e-3),
    )


def test_xent_weighted_mean(dev, gen):
    logits, weights = rand(gen, dev, 2, 3, 5), rand(gen, dev, 2, 3, 5, positive=True)

    def reference(x, w):
        return (w * (torch.logsumexp(x, -1, keepdim=True) - x)).sum() / 6

    check(bkt.xent_weighted_mean, (logits, weights), reference)


def test_xent_weighted_mean_matches_cross_entropy_with_one_hot_weights(dev, gen):
    logits = rand(gen, dev, 4, 7)
    labels = torch.tensor([0, 6, 3, 3], device=dev)
    one_hot = torch.nn.functional.one_hot(labels, 7).to(F64)
    got = bkt.xent_weighted_mean(logits, one_hot)
    torch.testing.assert_close(got, torch.nn.functional.cross_entropy(logits, labels), rtol=1e-12, atol=0)
    got.backward()
    want = torch.autograd.grad(torch.nn.functional.cross_entropy(logits, labels), logits)[0]
    torch.testing.assert_close(logits.grad, want, rtol=1e-12, atol=1e-15)


def test_xent_teacher(dev, gen):
    student, teacher = rand(gen, dev, 2, 2, 5), rand(gen, dev, 2, 2, 5)

    def reference(s, t):
        return (torch.logsumexp(s, -1) - (torch.softmax(t, -1) * s).sum(-1)).mean()

    check(bkt.xent_teacher, (student, teacher), reference)


# ---- products --------------------------------------------------------------------------------


def _op(t, trans):
    return t.transpose(-1, -2) if trans else t


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("batched", [True, False], ids=["3d", "2d"])
def test_bmm(dev, gen, trans_a, trans_b, batched):
    m, n, p = 3, 4, 2
    lead = (2,) if batched else ()
    a = rand(gen, dev, *lead, *((n, m) if trans_a else (m, n)))
    b = rand(gen, dev, *lead, *((p, n) if trans_b else (n, p)))
    check(
        lambda a, b: bkt.bmm(a, b, trans_a=trans_a, trans_b=trans_b),
        (a, b),
        lambda a, b: torch.matmul(_op(a, trans_a), _op(b, trans_b)),
    )


def test_bmm_rejects_mismatched_inner_extents(gen):
    with pytest.raises(ValueError, match="inner extents"):
        bkt.bmm(torch.randn(2, 3, 4, dtype=F64), torch.randn(2, 3, 4, dtype=F64))


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)])
def test_bmm_scaled(dev, gen, trans_a, trans_b):
    a = rand(gen, dev, 2, *((4, 3) if trans_a else (3, 4)))
    b = rand(gen, dev, 2, *((2, 4) if trans_b else (4, 2)))
    out, range_loss = bkt.bmm_scaled(a, b, 0.25, trans_a=trans_a, trans_b=trans_b)
    assert range_loss is False

    def fn(a, b):
        return bkt.bmm_scaled(a, b, 0.25, trans_a=trans_a, trans_b=trans_b)[0]

    check(fn, (a, b), lambda a, b: 0.25 * torch.matmul(_op(a, trans_a), _op(b, trans_b)))
    zero = torch.zeros(1, 2, 2, dtype=F64, device=dev)
    assert bkt.bmm_scaled(zero, zero, 1.0)[1] is True  # an exact zero result is below the smallest normal


# ---- scans -----------------------------------------------------------------------------------


def _scan_reference(A, B, X, h0):
    h, out = h0, []
    for t in range(X.shape[0]):
        a = A[t] if A.dim() == 2 else A
        b = B[t] if B.dim() == 2 else B
        h = a * h + b * X[t]
        out.append(h)
    return torch.stack(out)


def test_scan_diag(dev, gen):
    inputs = (rand(gen, dev, 3), rand(gen, dev, 3), rand(gen, dev, 5, 3), rand(gen, dev, 3))
    check(bkt.scan_diag, inputs, _scan_reference)


def test_scan_diag_var(dev, gen):
    inputs = (rand(gen, dev, 5, 3), rand(gen, dev, 5, 3), rand(gen, dev, 5, 3), rand(gen, dev, 3))
    check(bkt.scan_diag_var, inputs, _scan_reference)


# ---- broadcasts and layout ----------------------------------------------------------------------


def test_broadcast_to_numpy_rule(dev, gen):
    x = rand(gen, dev, 3, 1)
    check(lambda x: bkt.broadcast_to(x, (2, 3, 4)), (x,), lambda x: x.expand(2, 3, 4))


def test_broadcast_to_permuting_axis_map(dev, gen):
    x = rand(gen, dev, 3, 2)
    # Output axes: input axis 1, an inserted axis, input axis 0.
    check(
        lambda x: bkt.broadcast_to(x, (2, 4, 3), axis_map=(2, 0, 1)),
        (x,),
        lambda x: x.t().unsqueeze(1).expand(2, 4, 3),
    )


def test_broadcast_to_adjoint(dev, gen):
    dout = rand(gen, dev, 2, 3, 4)
    check(lambda d: bkt.broadcast_to_adjoint(d, (3, 1)), (dout,), lambda d: d.sum(0).sum(-1, keepdim=True))


@pytest.mark.parametrize("depth", [0, 1])
def test_swap_adjacent(dev, gen, depth):
    x = rand(gen, dev, 2, 3, 4)
    check(lambda x: bkt.swap_adjacent(x, depth), (x,), lambda x: x.transpose(depth, depth + 1).contiguous())


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sum_axis(dev, gen, axis):
    x = rand(gen, dev, 2, 3, 4)
    check(lambda x: bkt.sum_axis(x, axis), (x,), lambda x: x.sum(axis))


def test_sum_axis_of_a_vector(dev, gen):
    x = rand(gen, dev, 5)
    check(lambda x: bkt.sum_axis(x, 0), (x,), lambda x: x.sum(0))


# ---- gather and scatter-add ----------------------------------------------------------------------


INDICES = [3, 0, 3, 7, 1]  # a repeat and one index past the 4 rows


def test_rows_gather(dev, gen):
    mat = rand(gen, dev, 4, 3)

    def reference(m):
        padded = torch.cat([m, torch.zeros(5, 3, dtype=F64, device=dev)])
        return padded[torch.tensor(INDICES, device=dev)]

    check(lambda m: bkt.rows_gather(m, INDICES), (mat,), reference)
    check(lambda m: bkt.rows_gather(m, torch.tensor(INDICES)), (mat,), reference)
    # The backward pass uses the indices of the forward pass, not the caller's array as it is later.
    idx = torch.tensor(INDICES)
    out = bkt.rows_gather(mat, idx)
    idx.zero_()
    out.sum().backward()
    counts = torch.tensor([1.0, 1, 0, 2], dtype=F64, device=dev)  # how often each row was gathered
    torch.testing.assert_close(mat.grad, counts.unsqueeze(1).expand(4, 3))


def test_rows_scatter_add(dev, gen):
    mat, values = rand(gen, dev, 4, 3), rand(gen, dev, 5, 3)

    def reference(m, v):
        out = m
        for r, i in enumerate(INDICES):
            if i < 4:
                out = out.index_add(0, torch.tensor([i], device=dev), v[r : r + 1])
        return out

    check(lambda m, v: bkt.rows_scatter_add(m, v, np.array(INDICES)), (mat, values), reference)


# ---- FFTs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 6, 7])
def test_rfft(dev, gen, n):
    x = rand(gen, dev, 2, 3, n)
    check(bkt.rfft, (x,), lambda x: torch.view_as_real(torch.fft.rfft(x)), atol=1e-13)


@pytest.mark.parametrize("n", [6, 7])
@pytest.mark.parametrize("normalized", [True, False], ids=["irfft", "unnormalized"])
def test_irfft(dev, gen, n, normalized):
    spec = rand(gen, dev, 2, 3, n // 2 + 1, 2)
    fn = bkt.irfft if normalized else bkt.irfft_unnormalized

    def reference(s):
        # The imaginary parts of bin 0 and (even n) bin n/2 are ignored.
        keep = torch.ones(n // 2 + 1, 2, dtype=F64, device=dev)
        keep[0, 1] = 0
        if n % 2 == 0:
            keep[-1, 1] = 0
        y = torch.fft.irfft(torch.view_as_complex((s * keep).contiguous()), n)
        return y if normalized else n * y

    check(lambda s: fn(s, n), (spec,), reference, atol=1e-13)


# ---- convolution ----------------------------------------------------------------------------------


def _dense_kernel(weight, groups):
    """A torch grouped weight (C_out, C_in/groups, k...) placed on the diagonal
    blocks of the library's dense (C_out, C_in, k...) kernel."""
    c_out, cg = weight.shape[:2]
    dense = torch.zeros(c_out, cg * groups, *weight.shape[2:], dtype=weight.dtype, device=weight.device)
    cog = c_out // groups
    for g in range(groups):
        dense[g * cog : (g + 1) * cog, g * cg : (g + 1) * cg] = weight[g * cog : (g + 1) * cog]
    return dense


def test_conv1d_stride_padding_dilation_bias(dev, gen):
    x, kernel, bias = rand(gen, dev, 2, 3, 9), rand(gen, dev, 2, 3, 3), rand(gen, dev, 2)

    def fn(x, k, b):
        return bkt.conv(x, k, b, stride=2, pad_before=2, pad_after=1, dilation=2)

    def reference(x, k, b):
        return torch.nn.functional.conv1d(torch.nn.functional.pad(x, (2, 1)), k, b, stride=2, dilation=2)

    check(fn, (x, kernel, bias), reference)


def test_conv2d_groups_and_batch_axes(dev, gen):
    x, weight = rand(gen, dev, 2, 1, 4, 5, 4), rand(gen, dev, 4, 2, 2, 3)
    kernel = _dense_kernel(weight.detach(), 2).requires_grad_()

    def fn(x, k):
        return bkt.conv(x, k, None, stride=(1, 2), pad_before=(1, 0), pad_after=(0, 1), groups=2)

    def reference(x, k):
        w = torch.cat([k[:2, :2], k[2:, 2:]])  # the diagonal blocks, torch's grouped layout
        padded = torch.nn.functional.pad(x.reshape(2, 4, 5, 4), (0, 1, 1, 0))
        out = torch.nn.functional.conv2d(padded, w, stride=(1, 2), groups=2)
        return out.reshape(2, 1, *out.shape[1:])

    check(fn, (x, kernel), reference)
    # Blocks outside each output channel's group are never read, so their gradient is 0.
    fn(x, kernel).sum().backward()
    assert (kernel.grad[:2, 2:] == 0).all() and (kernel.grad[2:, :2] == 0).all()


def test_conv1d_without_batch_axes(dev, gen):
    x, kernel = rand(gen, dev, 2, 6), rand(gen, dev, 3, 2, 2)
    check(
        lambda x, k: bkt.conv(x, k, None, dilation=3),
        (x, kernel),
        lambda x, k: torch.nn.functional.conv1d(x.unsqueeze(0), k, dilation=3).squeeze(0),
    )


# ---- autograd behaviour ---------------------------------------------------------------------


def test_results_are_the_library_memory(dev, gen, monkeypatch):
    made = []
    real = bufkern.layernorm_forward

    def spy(*args, **kwargs):
        results = real(*args, **kwargs)
        made.extend(b.data_ptr for b in results)
        return results

    monkeypatch.setattr(bufkern, "layernorm_forward", spy)
    x, gamma, beta = rand(gen, dev, 3, 4), rand(gen, dev, 4), rand(gen, dev, 4)
    out = bkt.layer_norm(x, gamma, beta)
    assert out.data_ptr() == made[0]  # exported, not copied
    out.sum().backward()  # the saved statistics, also exported, feed the backward pass
    torch.testing.assert_close(gamma.grad, torch.nn.functional.layer_norm(x, (4,), eps=1e-5).sum(0).detach())


def test_empty_gather(dev, gen):
    mat = rand(gen, dev, 4, 3)
    out = bkt.rows_gather(mat, [])
    assert out.shape == (0, 3)
    out.sum().backward()
    assert (mat.grad == 0).all()


def test_second_derivatives_raise(gen):
    x = rand(gen, "cpu", 2, 3)
    (g,) = torch.autograd.grad(bkt.softmax(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        g.sum().backward()


def test_float32_runs_in_float32(gen):
    x = torch.randn(3, 4, generator=gen).requires_grad_()
    y = bkt.softmax(x)
    y[:, 0].sum().backward()
    assert y.dtype == x.grad.dtype == torch.float32
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_other_dtypes_are_rejected():
    with pytest.raises(bufkern.DtypeError):
        bkt.softmax(torch.zeros(2, 3, dtype=torch.float16))
    # Weights are data, not a mask: a dtype other than the logits' is refused, not converted.
    with pytest.raises(bufkern.DtypeError):
        bkt.xent_weighted_mean(torch.zeros(2, 3, dtype=F64), torch.ones(2, 3, dtype=torch.float32))


# ---- CUDA: torch's current stream, no copies ----------------------------------------------


@needs_cuda
def test_cuda_context_follows_the_current_stream():
    dev = torch.device(DEVICE)
    default = bkt.context_for(dev)
    assert default.stream == (torch.cuda.current_stream(dev).cuda_stream or 1)
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        assert bkt.context_for(dev).stream == side.cuda_stream
    assert bkt.context_for(dev) is default


@needs_cuda
def test_cuda_side_stream_forward_and_backward():
    dev = torch.device(DEVICE)
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        x = torch.empty(256, 1000, dtype=F64, device=dev)
        torch.cuda._sleep(20_000_000)  # keep the stream busy: the library's work must queue behind it
        x.copy_(torch.randn(256, 1000, dtype=F64, device=dev))
        x.requires_grad_()
        y = bkt.softmax(x)
        y[:, :10].sum().backward()
        want = torch.softmax(x.detach(), -1)
        side.synchronize()
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-15)
    ref_grad = torch.autograd.grad(torch.softmax(x, -1)[:, :10].sum(), x)[0]
    torch.testing.assert_close(x.grad, ref_grad, rtol=1e-10, atol=1e-14)


@needs_cuda
def test_cuda_results_are_library_memory_without_copies():
    dev = torch.device(DEVICE)
    a = torch.randn(8, 64, 64, dtype=F64, device=dev)
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    c = bkt.bmm(a, a)
    # The result lives in the library's memory, handed over through DLPack:
    # torch's allocator holds nothing more.
    assert torch.cuda.memory_allocated(dev) == before
    torch.testing.assert_close(c, torch.bmm(a, a), rtol=1e-12, atol=1e-12)


# ---- the training example -------------------------------------------------------------------


def test_training_example_reduces_the_loss(dev):
    spec = importlib.util.spec_from_file_location("train_torch", PYTHON_DIR / "examples" / "train_torch.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model, losses = example.train(steps=40, seed=3, device=str(dev))
    assert len(losses) == 40 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    assert example.accuracy(model, seed=4, device=str(dev)) > 0.6

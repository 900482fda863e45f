#!/usr/bin/env python3
"""Side-by-side benchmark: bufkern (through the Python binding) against the ATen
compositions a PyTorch user would write, on identical CUDA tensors, in one process.

For every reference case of docs/PERFORMANCE.md (same names as its ATen reference
table) plus size sweeps, the run

1. builds the inputs once as torch tensors and imports them into bufkern with
   DLPack (zero-copy: the same device memory);
2. checks agreement first: bufkern's result against a float64 reference (the
   ATen composition run on the inputs upcast to float64, or an exact
   composition for masks), within the contract's tolerance (contract section 4).
   A mismatch is reported and the case is not timed;
3. times both sides with CUDA events on torch's current stream (the bufkern
   context is bound to that stream with Context.set_stream), as the median over
   repeats after warm-up, rotating through several input copies when one set
   fits in L2;
4. reports time, GB/s over the fewest bytes the primitive must move (or
   TFLOP/s), the fraction of the copy bandwidth measured in the same run (a
   1 GiB device-to-device copy, bytes read + written), and the speedup.

Also measured: the per-call host overhead from Python (8x8 softmax and a
4x16^3 bmm, 10,000 calls, one synchronization).

Usage (GPU machine: torch with CUDA, numpy, matplotlib):
    BUFKERN_LIBRARY=build-gpu/libbufkern.so python bench/vs_torch.py \\
        --json bench.json --md bench.md --plots bench-plots
    python bench/vs_torch.py --quick --filter 'softmax|bmm'
    python bench/vs_torch.py --dry-run          # CPU, tiny shapes, bufkern side only
    OMP_NUM_THREADS=2 python bench/vs_torch.py --device cpu --sweep --max-bytes 268435456 \
        --json cpu.json   # CPU: bufkern, PyTorch's CPU kernels, numpy and a copy, interleaved
Exit status: 0 when every case ran and agreed, 1 when a case failed or disagreed,
2 when the run could not start.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np

try:
    import bufkern
except ImportError:  # run from the repository without installing the binding
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import bufkern

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep_shapes  # noqa: E402  (the sweep's shape generator, shared with the C harness)

torch = None  # imported in main() unless --dry-run
F = None

# Contract tolerances (contract section 4) by kind and dtype.
TOL = {
    "elem": {"f32": 1e-5, "f64": 1e-12},
    "red": {"f32": 1e-4, "f64": 1e-12},
    "contract": {"f32": 1e-4, "f64": 1e-12},
}
ES = {"f32": 4, "f64": 8}


# ---------------------------------------------------------------------------
# Runtimes: torch on a GPU, or numpy on the CPU for --dry-run
# ---------------------------------------------------------------------------


class TorchRT:
    """Inputs are CUDA tensors; bufkern runs on a context bound to torch's stream."""

    is_torch = True

    def __init__(self, device: str, seed: int = 0):
        self.device = torch.device(device)
        torch.cuda.set_device(self.device)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.gen = torch.Generator(device=self.device)
        self.gen.manual_seed(seed)
        self.ctx = bufkern.Context(str(self.device) if self.device.index is not None else "cuda:0")
        self.ctx.set_stream(torch.cuda.current_stream(self.device).cuda_stream)
        props = torch.cuda.get_device_properties(self.device)
        self.name = props.name
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)

    def dt(self, name):
        return {"f32": torch.float32, "f64": torch.float64}[name]

    def randn(self, shape, dt, scale=1.0):
        t = torch.randn(shape, dtype=self.dt(dt), device=self.device, generator=self.gen)
        return t.mul_(scale) if scale != 1.0 else t

    def uniform(self, shape, dt, lo, hi):
        t = torch.rand(shape, dtype=self.dt(dt), device=self.device, generator=self.gen)
        return t.mul_(hi - lo).add_(lo)

    def bernoulli(self, shape, dt, p):
        return (torch.rand(shape, device=self.device, generator=self.gen) < p).to(self.dt(dt))

    def zeros(self, shape, dt):
        return torch.zeros(shape, dtype=self.dt(dt), device=self.device)

    def arange(self, n):
        return torch.arange(n, device=self.device)

    def host_indices(self, n, hi, seed):
        rng = np.random.default_rng(seed)
        return rng.integers(0, hi, size=n).astype(np.uint64)

    def device_indices(self, host):
        return torch.from_numpy(host.astype(np.int64)).to(self.device)

    def rfft_packed(self, x):
        return torch.view_as_real(torch.fft.rfft(x, dim=-1)).contiguous()

    def is_array(self, v):
        return isinstance(v, torch.Tensor)

    def is_float(self, v):
        return isinstance(v, torch.Tensor) and v.is_floating_point()

    def f64(self, v):
        return v.double()

    def nbytes(self, v):
        return v.numel() * v.element_size()

    def data_ptr(self, v):
        return v.data_ptr()

    def to_bk(self, v):
        return bufkern.from_dlpack(v, ctx=self.ctx)

    def from_bk(self, buf, shape):
        return torch.from_dlpack(buf).view(shape)

    def as_f64(self, v):
        return v.double()

    def shape(self, v):
        return tuple(v.shape)

    def max_abs(self, v):
        fin = v[torch.isfinite(v)]
        return float(fin.abs().max()) if fin.numel() else 0.0

    def compare(self, got, ref, exact):
        """(error, mismatch text or None) for got vs ref (both float64)."""
        gn, rn = torch.isnan(got), torch.isnan(ref)
        if not torch.equal(gn, rn):
            return math.inf, f"NaN at {int((gn != rn).sum())} positions that differ"
        gi, ri = torch.isinf(got), torch.isinf(ref)
        if not torch.equal(gi, ri) or not torch.equal(got[ri], ref[ri]):
            return math.inf, "infinities differ"
        fin = ~(rn | ri)
        if exact:
            bad = int((got[fin] != ref[fin]).sum())
            return float(bad), (f"{bad} entries differ" if bad else None)
        if not bool(fin.any()):
            return 0.0, None
        return float((got[fin] - ref[fin]).abs().max()), None

    def sync(self):
        torch.cuda.synchronize(self.device)

    def free(self):
        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()

    def time(self, fn, warmup, repeats, target_ms):
        """Median ms per call of fn(k) with CUDA events on the current stream."""
        for k in range(warmup):
            fn(k)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(warmup)
        e.record()
        e.synchronize()
        est = max(s.elapsed_time(e), 1e-3)
        inner = int(min(200, max(1, round(target_ms / est))))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        k = warmup + 1
        for r in range(repeats):
            starts[r].record()
            for _ in range(inner):
                fn(k)
                k += 1
            ends[r].record()
        ends[-1].synchronize()
        samples = sorted(st.elapsed_time(en) / inner for st, en in zip(starts, ends))
        return float(np.median(samples)), samples, inner

    def copy_bandwidth(self, nbytes, repeats):
        pair = [torch.empty(nbytes, dtype=torch.uint8, device=self.device).fill_(1)]
        pair.append(torch.empty_like(pair[0]))
        ms, _, _ = self.time(lambda k: pair[1].copy_(pair[0]), 3, repeats, 0.0)
        pair.clear()
        self.free()
        return 2 * nbytes / (ms * 1e-3) / 1e9, ms


class TorchCPURT(TorchRT):
    """--device cpu: torch CPU tensors, bufkern's CPU backend reading the same memory through
    DLPack, numpy on the same arrays where a numpy composition exists (NUMPY below). Every library
    runs with the same number of threads (OMP_NUM_THREADS, default the machine's cores), and the
    sides are timed interleaved: sample after sample, bufkern, PyTorch, numpy and a warm copy of
    the case's bytes take turns, so load from other processes on the machine falls on all of them
    alike, and the fraction of copy of a case is the same-samples copy time over its time; the
    minimum and the median over the samples are reported."""

    interleaved = True

    def __init__(self, seed: int = 0):
        self.device = torch.device("cpu")
        self.threads = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
        torch.set_num_threads(self.threads)
        self.gen = torch.Generator()
        self.gen.manual_seed(seed)
        self.ctx = bufkern.Context("cpu")
        self.name = f"CPU ({platform.processor() or platform.machine()}, {self.threads} threads)"
        l2 = os.sysconf("SC_LEVEL2_CACHE_SIZE") if "SC_LEVEL2_CACHE_SIZE" in os.sysconf_names else 0
        self.l2_bytes = int(l2 or 2**20)

    def sync(self):
        pass

    def free(self):
        gc.collect()

    def _calls(self, fn, k, inner):
        t0 = time.perf_counter()
        for j in range(inner):
            fn(k + j)
        return (time.perf_counter() - t0) * 1e3 / inner

    def time_sides(self, fns, warmup, repeats, target_ms):
        """{side: (median ms, sorted samples, calls per sample)} for each fn(k) of the dict fns,
        the samples of the sides taken in turn."""
        inner = {}
        for side, fn in fns.items():
            for k in range(warmup):
                fn(k)
            est = max(self._calls(fn, warmup, 1), 1e-3)
            inner[side] = int(min(200, max(1, round(target_ms / est))))
        samples = {side: [] for side in fns}
        k = warmup + 1
        for _ in range(max(repeats, 3)):
            for side, fn in fns.items():
                samples[side].append(self._calls(fn, k, inner[side]))
                k += inner[side]
        return {side: (float(np.median(v)), sorted(v), inner[side]) for side, v in samples.items()}

    def time(self, fn, warmup, repeats, target_ms):
        return self.time_sides({"x": fn}, warmup, repeats, target_ms)["x"]

    def copy_bandwidth(self, nbytes, repeats):
        """Warm memory (both buffers written before timing), copied by torch with the same
        threads; the minimum over the repeats."""
        src = torch.ones(nbytes, dtype=torch.uint8)
        dst = torch.zeros_like(src)
        _, samples, _ = self.time(lambda k: dst.copy_(src), 2, repeats, 0.0)
        return 2 * nbytes / (samples[0] * 1e-3) / 1e9, samples[0]


def _np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_bmm(i, Bt, M, N, P, ta=0, tb=0):
    a = i["a"].numpy()
    b = i["b"].numpy()
    return np.matmul(a.swapaxes(1, 2) if ta else a, b.swapaxes(1, 2) if tb else b)


# numpy compositions by case family, on the torch CPU tensors' memory (zero-copy views): the
# third side of --device cpu. Families without one show no numpy column.
NUMPY = {
    "softmax": lambda i, R, C: _np_softmax(i["x"].numpy(), -1),
    "sweep_softmax": lambda i, R, C: _np_softmax(i["x"].numpy(), -1),
    "softmax_mid": lambda i, A, M, Z: _np_softmax(i["x"].numpy(), 1),
    "rows_sum": lambda i, R, C: i["x"].numpy().sum(1),
    "sweep_rows_sum": lambda i, R, C: i["x"].numpy().sum(1),
    "rows_max": lambda i, R, C: i["x"].numpy().max(1),
    "sum_axis": lambda i, A, M, Z: i["x"].numpy().sum(1),
    "rfft": lambda i, Bt, N: np.fft.rfft(i["x"].numpy(), axis=-1),
    "irfft": lambda i, Bt, N: np.fft.irfft(i["s"].numpy().view(np.complex64 if i["s"].dtype == torch.float32
                                                              else np.complex128)[..., 0], n=N, axis=-1),
    "bmm": _np_bmm,
    "sweep_bmm": _np_bmm,
}


class NumpyRT:
    """--dry-run: numpy inputs on the CPU, bufkern only, wall-clock timing."""

    is_torch = False

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.ctx = bufkern.Context("cpu")
        self.name = f"CPU ({platform.machine()}), dry run"
        self.l2_bytes = 256 * 2**10

    def dt(self, name):
        return {"f32": np.float32, "f64": np.float64}[name]

    def randn(self, shape, dt, scale=1.0):
        return (self.rng.standard_normal(shape) * scale).astype(self.dt(dt))

    def uniform(self, shape, dt, lo, hi):
        return self.rng.uniform(lo, hi, shape).astype(self.dt(dt))

    def bernoulli(self, shape, dt, p):
        return (self.rng.random(shape) < p).astype(self.dt(dt))

    def zeros(self, shape, dt):
        return np.zeros(shape, dtype=self.dt(dt))

    def arange(self, n):
        return np.arange(n)

    def host_indices(self, n, hi, seed):
        return np.random.default_rng(seed).integers(0, hi, size=n).astype(np.uint64)

    def device_indices(self, host):
        return host.astype(np.int64)

    def rfft_packed(self, x):
        c = np.fft.rfft(x.astype(np.float64), axis=-1)
        return np.ascontiguousarray(np.stack([c.real, c.imag], axis=-1).astype(x.dtype))

    def is_array(self, v):
        return isinstance(v, np.ndarray)

    def is_float(self, v):
        return isinstance(v, np.ndarray) and v.dtype.kind == "f"

    def f64(self, v):
        return v.astype(np.float64)

    def nbytes(self, v):
        return v.nbytes

    def data_ptr(self, v):
        return v.__array_interface__["data"][0]

    def to_bk(self, v):
        return bufkern.from_dlpack(v, ctx=self.ctx)

    def from_bk(self, buf, shape):
        return buf.numpy().reshape(shape)

    def as_f64(self, v):
        return np.asarray(v, dtype=np.float64)

    def shape(self, v):
        return tuple(np.shape(v))

    def max_abs(self, v):
        fin = v[np.isfinite(v)]
        return float(np.abs(fin).max()) if fin.size else 0.0

    def compare(self, got, ref, exact):
        gn, rn = np.isnan(got), np.isnan(ref)
        if not np.array_equal(gn, rn):
            return math.inf, f"NaN at {int((gn != rn).sum())} positions that differ"
        gi, ri = np.isinf(got), np.isinf(ref)
        if not np.array_equal(gi, ri) or not np.array_equal(got[ri], ref[ri]):
            return math.inf, "infinities differ"
        fin = ~(rn | ri)
        if exact:
            bad = int((got[fin] != ref[fin]).sum())
            return float(bad), (f"{bad} entries differ" if bad else None)
        if not fin.any():
            return 0.0, None
        return float(np.abs(got[fin] - ref[fin]).max()), None

    def sync(self):
        pass

    def free(self):
        gc.collect()

    def time(self, fn, warmup, repeats, target_ms):
        for k in range(warmup):
            fn(k)
        t0 = time.perf_counter()
        fn(warmup)
        est = max((time.perf_counter() - t0) * 1e3, 1e-3)
        inner = int(min(200, max(1, round(target_ms / est))))
        samples, k = [], warmup + 1
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn(k)
                k += 1
            samples.append((time.perf_counter() - t0) * 1e3 / inner)
        samples.sort()
        return float(np.median(samples)), samples, inner

    def copy_bandwidth(self, nbytes, repeats):
        src = np.ones(nbytes, dtype=np.uint8)
        dst = np.empty_like(src)
        ms, _, _ = self.time(lambda k: np.copyto(dst, src), 1, repeats, 0.0)
        return 2 * nbytes / (ms * 1e-3) / 1e9, ms


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


class Case:
    """One benchmark case.

    make(rt, dt, *dims) -> dict of inputs. Keys starting with "h_" are host
    arrays given to bufkern as they are (indices); keys starting with "t_" are
    used by the ATen side only. Every other entry is a device array imported
    into bufkern with DLPack.
    aten(rt, inp, *dims) -> output or tuple (the ATen composition).
    bk(rt, ctx, b, *dims) -> Buffer or tuple (bufkern through the binding).
    ref(rt, inp64, *dims) -> float64 reference; defaults to aten on inputs
    upcast to float64. check: "exact" or a tolerance kind.
    bytes/flops(es, *dims): the fewest bytes moved / the flop count.
    scale(rt, inp64, ref, *dims) -> the result's natural magnitude (default max|ref|).
    """

    def __init__(self, name, family, dims, dry, make, aten, bk, check="red", bytes=None, flops=None,
                 ref=None, scale=None, n=None, note="", dtype="f32", sweep_x=None, perf=True):
        self.name, self.family, self.dims, self.dry = name, family, tuple(dims), tuple(dry)
        self.make_fn, self.aten_fn, self.bk_fn, self.ref_fn = make, aten, bk, ref
        self.check, self.bytes_fn, self.flops_fn = check, bytes, flops
        self.scale_fn, self.n_fn, self.note = scale, n, note
        self.dtype, self.sweep_x, self.perf = dtype, sweep_x, perf


def _cases_for(dtype: str, quick: bool):
    """The reference cases and the sweeps, for one dtype ("f32" or "f64")."""
    cases = []

    def add(*args, **kw):
        kw.setdefault("dtype", dtype)
        cases.append(Case(*args, **kw))

    def nm(base):
        # PERF names carry "_f32" for float32; the float64 variant swaps it.
        if dtype == "f64":
            return base.replace("_f32", "_f64") if "_f32" in base else base + "_f64"
        return base

    # -- softmax ------------------------------------------------------------------
    add(nm("softmax_lastaxis_8192x8192_f32"), "softmax", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"x": rt.randn((R, C), dt, 3.0)},
        aten=lambda rt, i, R, C: torch.softmax(i["x"], -1),
        bk=lambda rt, ctx, b, R, C: bufkern.softmax(b["x"], dims=(R, C), axis=1, ctx=ctx),
        bytes=lambda es, R, C: 2 * R * C * es, scale=lambda *a: 1.0)
    add(nm("softmax_midaxis_256x1024x256_f32"), "softmax_mid", (256, 1024, 256), (4, 24, 8),
        make=lambda rt, dt, A, M, Z: {"x": rt.randn((A, M, Z), dt, 3.0)},
        aten=lambda rt, i, A, M, Z: torch.softmax(i["x"], 1),
        bk=lambda rt, ctx, b, A, M, Z: bufkern.softmax(b["x"], dims=(A, M, Z), axis=1, ctx=ctx),
        bytes=lambda es, A, M, Z: 2 * A * M * Z * es, scale=lambda *a: 1.0)

    def aten_masked_softmax(rt, i, R, C):
        return torch.softmax(i["s"].masked_fill(i["m"] == 0, float("-inf")), -1).nan_to_num_(0.0)

    add(nm("hard_masked_softmax_8192x8192_f32"), "masked_softmax", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"s": rt.randn((R, C), dt, 3.0), "m": rt.bernoulli((R, C), dt, 0.5)},
        aten=aten_masked_softmax,
        bk=lambda rt, ctx, b, R, C: bufkern.rows_masked_softmax(b["s"], b["m"], rows=R, cols=C, ctx=ctx),
        bytes=lambda es, R, C: 3 * R * C * es, scale=lambda *a: 1.0,
        note="masked_fill+softmax+nan_to_num")

    # -- rows ----------------------------------------------------------------------
    add(nm("row_sum_8192x8192_f32"), "rows_sum", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"x": rt.randn((R, C), dt)},
        aten=lambda rt, i, R, C: i["x"].sum(1),
        bk=lambda rt, ctx, b, R, C: bufkern.rows_sum(b["x"], rows=R, cols=C, ctx=ctx),
        bytes=lambda es, R, C: (R * C + R) * es,
        scale=lambda rt, i, ref, R, C: rt.max_abs(abs(i["x"]).sum(1)))
    add(nm("row_max_8192x8192_f32"), "rows_max", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"x": rt.randn((R, C), dt)},
        aten=lambda rt, i, R, C: i["x"].amax(1),
        bk=lambda rt, ctx, b, R, C: bufkern.rows_max(b["x"], rows=R, cols=C, ctx=ctx),
        check="exact", bytes=lambda es, R, C: (R * C + R) * es)

    def aten_first_max(rt, i, R, C):
        x = i["x"]
        return torch.zeros_like(x).scatter_(1, x.argmax(1, keepdim=True), 1.0)

    add(nm("first_max_mask_8192x8192_f32"), "first_max_mask", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"x": rt.randn((R, C), dt)},
        aten=aten_first_max,
        bk=lambda rt, ctx, b, R, C: bufkern.rows_first_max_mask(b["x"], rows=R, cols=C, ctx=ctx),
        check="exact", bytes=lambda es, R, C: 2 * R * C * es, note="argmax+scatter")

    def aten_topk(rt, i, R, C, k):
        x = i["x"]
        return torch.zeros_like(x).scatter_(1, torch.topk(x, k, dim=1).indices, 1.0)

    def aten_topk_count(rt, i, R, C, k):
        # Exact ties: j beats i when x_j > x_i, or neither is greater and j < i.
        x = i["x"]
        xi, xj = x[:, None, :], x[:, :, None]
        idx = torch.arange(C, device=x.device)
        greater = xj > xi
        neither = ~greater & ~(xi > xj)
        beats = greater | (neither & (idx[:, None] < idx[None, :]))
        return (beats.sum(1) < k).to(x.dtype)

    for variant, comp, note in (("topk", aten_topk, "torch.topk+scatter (ties unspecified)"),
                                ("count", aten_topk_count, "compare-and-count, exact ties")):
        add(nm(f"topk_mask_262144x64_k4_{variant}"), "topk_mask", (262144, 64, 4), (128, 64, 4),
            make=lambda rt, dt, R, C, k: {"x": rt.randn((R, C), dt)},
            aten=comp,
            bk=lambda rt, ctx, b, R, C, k: bufkern.rows_topk_mask(b["x"], rows=R, cols=C, k=k, ctx=ctx),
            ref=aten_topk_count, check="exact", bytes=lambda es, R, C, k: 2 * R * C * es, note=note)

    # -- layer norm ------------------------------------------------------------------
    def make_ln(rt, dt, R, C):
        return {"x": rt.randn((R, C), dt, 2.0), "g": rt.randn((C,), dt), "b": rt.randn((C,), dt)}

    def aten_ln_fwd(rt, i, R, C):
        out, mean, rstd = torch.native_layer_norm(i["x"], (C,), i["g"], i["b"], 1e-5)
        return out, (i["x"] - mean) * rstd, rstd.view(R)

    def ln_fwd_scale(rt, i, ref, R, C):
        return max(rt.max_abs(ref[1]) * rt.max_abs(i["g"]) + rt.max_abs(i["b"]), 1.0)

    add(nm("layernorm_fwd_65536x4096_f32"), "layernorm_fwd", (65536, 4096), (64, 96),
        make=make_ln, aten=aten_ln_fwd,
        bk=lambda rt, ctx, b, R, C: bufkern.layernorm_forward(b["x"], b["g"], b["b"], rows=R, cols=C, eps=1e-5, ctx=ctx),
        bytes=lambda es, R, C: (3 * R * C + 2 * C + R) * es, scale=ln_fwd_scale,
        note="native_layer_norm + normalized")

    def make_ln_bwd(rt, dt, R, C):
        i = make_ln(rt, dt, R, C)
        out, norm, inv = bufkern.layernorm_forward(rt.to_bk(i["x"]), rt.to_bk(i["g"]), rt.to_bk(i["b"]),
                                                   rows=R, cols=C, eps=1e-5, ctx=rt.ctx)
        i["n"] = rt.from_bk(norm, (R, C))
        i["inv"] = rt.from_bk(inv, (R,))
        i["dy"] = rt.randn((R, C), dt)
        if rt.is_torch:
            _, mean, rstd = torch.native_layer_norm(i["x"], (C,), i["g"], i["b"], 1e-5)
            i["t_mean"], i["t_rstd"] = mean, rstd
        return i

    def aten_ln_vjp(rt, i, R, C):
        g = i["dy"] * i["g"]
        n = i["n"]
        s1 = g.sum(1, keepdim=True)
        s2 = (g * n).sum(1, keepdim=True)
        dx = (i["inv"] / C)[:, None] * (C * g - s1 - n * s2)
        return dx, (i["dy"] * n).sum(0), i["dy"].sum(0)

    def aten_ln_native_bwd(rt, i, R, C):
        return torch.ops.aten.native_layer_norm_backward(i["dy"], i["x"], [C], i["t_mean"], i["t_rstd"],
                                                         i["g"], i["b"], [True, True, True])

    def ln_bwd_scale(rt, i, ref, R, C):
        return max(rt.max_abs(ref[0]), rt.max_abs(ref[1]), rt.max_abs(ref[2]))

    ln_bwd_bytes = lambda es, R, C: (3 * R * C + R + 3 * C) * es  # noqa: E731
    bk_ln_bwd = lambda rt, ctx, b, R, C: bufkern.layernorm_backward(  # noqa: E731
        b["dy"], b["n"], b["inv"], b["g"], rows=R, cols=C, ctx=ctx)
    add(nm("layernorm_vjp_65536x4096_f32"), "layernorm_vjp", (65536, 4096), (64, 96),
        make=make_ln_bwd, aten=aten_ln_vjp, bk=bk_ln_bwd, bytes=ln_bwd_bytes, scale=ln_bwd_scale,
        note="formula composed")
    add(nm("layernorm_bwd_native_65536x4096_f32"), "layernorm_vjp", (65536, 4096), (64, 96),
        make=make_ln_bwd, aten=aten_ln_native_bwd, bk=bk_ln_bwd, ref=aten_ln_vjp, bytes=ln_bwd_bytes,
        scale=ln_bwd_scale, note="aten native backward (needs x); bufkern: the VJP from saved values")

    # -- bmm ---------------------------------------------------------------------------
    def make_bmm(ta, tb):
        def make(rt, dt, Bt, M, N, P):
            return {"a": rt.randn((Bt, N, M) if ta else (Bt, M, N), dt),
                    "b": rt.randn((Bt, P, N) if tb else (Bt, N, P), dt)}
        return make

    def aten_bmm(ta, tb):
        def f(rt, i, Bt, M, N, P):
            a = i["a"].transpose(1, 2) if ta else i["a"]
            b = i["b"].transpose(1, 2) if tb else i["b"]
            return torch.bmm(a, b)
        return f

    def bmm_scale(ta, tb):
        def f(rt, i, ref, Bt, M, N, P):
            a = abs(i["a"]).swapaxes(1, 2) if ta else abs(i["a"])
            b = abs(i["b"]).swapaxes(1, 2) if tb else abs(i["b"])
            return rt.max_abs(torch.bmm(a, b)) if rt.is_torch else rt.max_abs(np.matmul(a, b))
        return f

    def bmm_case(name, family, dims, dry, ta, tb, **kw):
        add(name, family, dims, dry, make=make_bmm(ta, tb), aten=aten_bmm(ta, tb),
            bk=lambda rt, ctx, b, Bt, M, N, P: bufkern.bmm(b["a"], b["b"], batch=Bt, m=M, n=N, p=P, trans_a=ta, trans_b=tb, ctx=ctx),
            check="contract", n=lambda Bt, M, N, P: N, flops=lambda Bt, M, N, P: 2 * Bt * M * N * P,
            scale=bmm_scale(ta, tb), **kw)

    for ta, tb, tag in ((0, 0, ""), (1, 0, "_AT"), (0, 1, "_BT")):
        bmm_case(f"bmm_64x1024^3{tag}_{dtype}", "bmm", (64, 1024, 1024, 1024), (2, 16, 24, 8), ta, tb)

    def aten_scaled(rt, i, Bt, M, N, P, s):
        a, b = i["a"], i["b"]
        c = torch.bmm(a, b).mul_(s)
        fi = torch.finfo(c.dtype)
        flag = ((~torch.isfinite(a)).any() | (~torch.isfinite(b)).any() | (~torch.isfinite(c)).any()
                | (c.abs() < fi.tiny).any() | (s * N * a.abs().amax() * b.abs().amax() > fi.max))
        return c, bool(flag.item())

    add(nm("scaled_bmm_flag_64x1024^3_f32"), "bmm_scaled", (64, 1024, 1024, 1024, 0.125), (2, 16, 24, 8, 0.125),
        make=lambda rt, dt, Bt, M, N, P, s: make_bmm(0, 0)(rt, dt, Bt, M, N, P),
        aten=aten_scaled,
        bk=lambda rt, ctx, b, Bt, M, N, P, s: bufkern.bmm_scaled(b["a"], b["b"], batch=Bt, m=M, n=N, p=P, scale=s, ctx=ctx),
        check="contract", n=lambda Bt, M, N, P, s: N, flops=lambda Bt, M, N, P, s: 2 * Bt * M * N * P,
        scale=lambda rt, i, ref, Bt, M, N, P, s: s * bmm_scale(0, 0)(rt, i, ref, Bt, M, N, P),
        note="scale+bmm+checks+sync")

    # -- FFT -------------------------------------------------------------------------------
    def fft_scale(rt, i, ref, Bt, N):
        return rt.max_abs(abs(i["x"]).sum(-1))

    for n, dry_n, suffix in ((4096, 64, ""), (4095, 63, "_oddn")):
        add(nm(f"rfft_packed_4096x{n}_f32") + suffix if dtype == "f32" else f"rfft_packed_4096x{n}_f64{suffix}",
            "rfft", (4096, n), (8, dry_n),
            make=lambda rt, dt, Bt, N: {"x": rt.randn((Bt, N), dt)},
            aten=lambda rt, i, Bt, N: torch.view_as_real(torch.fft.rfft(i["x"], dim=-1)),
            bk=lambda rt, ctx, b, Bt, N: bufkern.rfft(b["x"], batch=Bt, n=N, ctx=ctx),
            check="contract", n=lambda Bt, N: N, scale=fft_scale,
            bytes=lambda es, Bt, N: (Bt * N + Bt * (N // 2 + 1) * 2) * es)

    def irfft_scale(rt, i, ref, Bt, N):
        return rt.max_abs(abs(i["s"]).sum((-1, -2))) * 2 / N

    add(nm("irfft_packed_4096x4096_f32"), "irfft", (4096, 4096), (8, 64),
        make=lambda rt, dt, Bt, N: {"s": rt.rfft_packed(rt.randn((Bt, N), dt))},
        aten=lambda rt, i, Bt, N: torch.fft.irfft(torch.view_as_complex(i["s"]), n=N, dim=-1),
        bk=lambda rt, ctx, b, Bt, N: bufkern.irfft(b["s"], batch=Bt, n=N, ctx=ctx),
        check="contract", n=lambda Bt, N: N, scale=irfft_scale,
        bytes=lambda es, Bt, N: (Bt * N + Bt * (N // 2 + 1) * 2) * es)

    # -- scans --------------------------------------------------------------------------------
    def hillis_steele(a, b):
        """h[t] = a[t]*h[t-1] + b[t] (h[-1] = 0) along dim 0 in log2(T) steps."""
        a, b = a.clone(), b.clone()
        T, off = b.shape[0], 1
        while off < T:
            b2 = b.clone()
            b2[off:] += a[off:] * b[:-off]
            a2 = a.clone()
            a2[off:] *= a[:-off]
            a, b, off = a2, b2, off * 2
        return b

    def make_scan(var):
        def make(rt, dt, T, N):
            i = {"A": rt.uniform((T, N) if var else (N,), dt, 0.5, 0.999),
                 "B": rt.randn((T, N) if var else (N,), dt),
                 "X": rt.randn((T, N), dt), "h0": rt.randn((N,), dt)}
            return i
        return make

    def aten_scan(var):
        def f(rt, i, T, N):
            A, B, X, h0 = i["A"], i["B"], i["X"], i["h0"]
            b = B * X
            a = A if var else A.expand(T, N)
            b[0] += a[0] * h0
            return hillis_steele(a, b)
        return f

    def aten_scan_seq(rt, i, T, N):
        A, B, X, h0 = i["A"], i["B"], i["X"], i["h0"]
        out = torch.empty_like(X)
        h = h0
        for t in range(T):
            h = A[t] * h + B[t] * X[t]
            out[t] = h
        return out

    def scan_scale(var):
        def f(rt, i, ref, T, N):
            if not rt.is_torch:
                return rt.max_abs(ref)
            ab = {k: i[k].abs() for k in ("A", "B", "X", "h0")}
            return rt.max_abs(aten_scan(var)(rt, ab, T, N))
        return f

    for var, tag in ((False, "shared"), (True, "var")):
        add(nm(f"selective_scan_{tag}_T4096_N16384_f32"), f"scan_{tag}", (4096, 16384), (64, 24),
            make=make_scan(var), aten=aten_scan(var),
            bk=(lambda rt, ctx, b, T, N: bufkern.scan_diag_var(b["A"], b["B"], b["X"], b["h0"], seq_len=T, state=N, ctx=ctx))
            if var else
            (lambda rt, ctx, b, T, N: bufkern.scan_diag(b["A"], b["B"], b["X"], b["h0"], seq_len=T, state=N, ctx=ctx)),
            scale=scan_scale(var),
            bytes=(lambda es, T, N: (4 * T * N + N) * es) if var else (lambda es, T, N: (2 * T * N + 3 * N) * es),
            note="ATen Hillis-Steele composition")
    add(nm("selective_scan_var_T512_N16384_seq") if dtype == "f32" else "selective_scan_var_T512_N16384_seq_f64",
        "scan_var", (512, 16384), (16, 24),
        make=make_scan(True), aten=aten_scan_seq, ref=aten_scan(True),
        bk=lambda rt, ctx, b, T, N: bufkern.scan_diag_var(b["A"], b["B"], b["X"], b["h0"], seq_len=T, state=N, ctx=ctx),
        scale=scan_scale(True), bytes=lambda es, T, N: (4 * T * N + N) * es, note="ATen sequential loop")

    def make_scan_bwd(var):
        def make(rt, dt, T, N):
            i = make_scan(var)(rt, dt, T, N)
            fwd = bufkern.scan_diag_var if var else bufkern.scan_diag
            out = fwd(*(rt.to_bk(i[k]) for k in ("A", "B", "X", "h0")), seq_len=T, state=N, ctx=rt.ctx)
            i["out"] = rt.from_bk(out, (T, N))
            i["dy"] = rt.randn((T, N), dt)
            return i
        return make

    def aten_scan_bwd(var):
        def f(rt, i, T, N):
            A, B, X, h0, out, dy = (i[k] for k in ("A", "B", "X", "h0", "out", "dy"))
            a = A if var else A.expand(T, N)
            a_next = torch.zeros_like(X)
            a_next[:-1] = a[1:]
            g = hillis_steele(a_next.flip(0), dy.flip(0)).flip(0)
            hprev = torch.cat([h0[None], out[:-1]])
            if var:
                return g * hprev, g * X, g * B, A[0] * g[0]
            return (g * hprev).sum(0), (g * X).sum(0), g * B, A * g[0]
        return f

    def scan_bwd_scale(var):
        def f(rt, i, ref, T, N):
            return max(rt.max_abs(r) for r in ref)
        return f

    for var, tag in ((False, "shared"), (True, "var")):
        add(nm(f"selective_scan_{tag}_bwd_T4096_N16384_f32"), f"scan_{tag}_bwd", (4096, 16384), (64, 24),
            make=make_scan_bwd(var), aten=aten_scan_bwd(var),
            bk=(lambda rt, ctx, b, T, N: bufkern.scan_diag_var_backward(
                b["A"], b["B"], b["X"], b["h0"], b["out"], b["dy"], seq_len=T, state=N, ctx=ctx)) if var else
            (lambda rt, ctx, b, T, N: bufkern.scan_diag_backward(
                b["A"], b["B"], b["X"], b["h0"], b["out"], b["dy"], seq_len=T, state=N, ctx=ctx)),
            scale=scan_bwd_scale(var),
            bytes=(lambda es, T, N: (8 * T * N + 2 * N) * es) if var else (lambda es, T, N: (4 * T * N + 6 * N) * es),
            note="ATen reverse Hillis-Steele composition (not in the ATen reference)")

    # -- broadcasts and layout ----------------------------------------------------------------------
    add(nm("broadcastTo_1x8192_to_8192x8192") if dtype == "f32" else "broadcastTo_1x8192_to_8192x8192_f64",
        "broadcast_to", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"x": rt.randn((1, C), dt)},
        aten=lambda rt, i, R, C: i["x"].expand(R, C).contiguous(),
        bk=lambda rt, ctx, b, R, C: bufkern.broadcast_to(b["x"], in_dims=(1, C), out_dims=(R, C), axis_map=(1, 2), ctx=ctx),
        check="exact", bytes=lambda es, R, C: (C + R * C) * es)
    add(nm("reduceFromBroadcast_8192x8192_to_1x8192") if dtype == "f32" else "reduceFromBroadcast_8192x8192_to_1x8192_f64",
        "broadcast_adjoint", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"g": rt.randn((R, C), dt)},
        aten=lambda rt, i, R, C: i["g"].sum(0, keepdim=True),
        bk=lambda rt, ctx, b, R, C: bufkern.broadcast_to_adjoint(b["g"], in_dims=(1, C), out_dims=(R, C), axis_map=(1, 2), ctx=ctx),
        scale=lambda rt, i, ref, R, C: rt.max_abs(abs(i["g"]).sum(0)),
        bytes=lambda es, R, C: (C + R * C) * es)
    add(nm("broadcast_col_8192_to_8192x8192") if dtype == "f32" else "broadcast_col_8192_to_8192x8192_f64",
        "broadcast_col", (8192, 8192), (64, 96),
        make=lambda rt, dt, R, C: {"v": rt.randn((R,), dt)},
        aten=lambda rt, i, R, C: i["v"][:, None].expand(R, C).contiguous(),
        bk=lambda rt, ctx, b, R, C: bufkern.broadcast_col(b["v"], rows=R, cols=C, ctx=ctx),
        check="exact", bytes=lambda es, R, C: (R + R * C) * es)
    for depth in (0, 1):
        add(nm(f"swapAdjacent_d{depth}_32x1024x2048") if dtype == "f32" else f"swapAdjacent_d{depth}_32x1024x2048_f64",
            "swap_adjacent", (32, 1024, 2048, depth), (4, 24, 40, depth),
            make=lambda rt, dt, A, M, Z, d: {"x": rt.randn((A, M, Z), dt)},
            aten=lambda rt, i, A, M, Z, d: i["x"].transpose(d, d + 1).contiguous(),
            bk=lambda rt, ctx, b, A, M, Z, d: bufkern.swap_adjacent(b["x"], dims=(A, M, Z), depth=d, ctx=ctx),
            check="exact", bytes=lambda es, A, M, Z, d: 2 * A * M * Z * es)
    add(nm("reduceSumAxis_ax1_256x1024x256") if dtype == "f32" else "reduceSumAxis_ax1_256x1024x256_f64",
        "sum_axis", (256, 1024, 256), (4, 24, 8),
        make=lambda rt, dt, A, M, Z: {"x": rt.randn((A, M, Z), dt)},
        aten=lambda rt, i, A, M, Z: i["x"].sum(1),
        bk=lambda rt, ctx, b, A, M, Z: bufkern.sum_axis(b["x"], dims=(A, M, Z), axis=1, ctx=ctx),
        scale=lambda rt, i, ref, A, M, Z: rt.max_abs(abs(i["x"]).sum(1)),
        bytes=lambda es, A, M, Z: (A * M * Z + A * Z) * es)

    # -- gather / scatter ------------------------------------------------------------------------------
    def make_gather(rt, dt, K, R, C):
        h = rt.host_indices(K, R, 7)
        return {"mat": rt.randn((R, C), dt), "h_idx": h, "t_idx": rt.device_indices(h)}

    add(nm("gather_rows_k65536_of_131072x4096") if dtype == "f32" else "gather_rows_k65536_of_131072x4096_f64",
        "gather", (65536, 131072, 4096), (40, 60, 24),
        make=make_gather,
        aten=lambda rt, i, K, R, C: i["mat"].index_select(0, i["t_idx"]),
        bk=lambda rt, ctx, b, K, R, C: bufkern.rows_gather(b["mat"], rows=R, cols=C, indices=b["h_idx"], ctx=ctx),
        check="exact", bytes=lambda es, K, R, C: 2 * K * C * es + K * 8,
        note="bufkern uploads the host indices in every call")

    def make_scatter(rt, dt, K, R, C):
        i = make_gather(rt, dt, K, R, C)
        i["v"] = rt.randn((K, C), dt)
        return i

    add(nm("scatter_add_rows_k65536_into_131072x4096") if dtype == "f32" else "scatter_add_rows_k65536_into_131072x4096_f64",
        "scatter_add", (65536, 131072, 4096), (40, 60, 24),
        make=make_scatter,
        aten=lambda rt, i, K, R, C: i["mat"].clone().index_add_(0, i["t_idx"], i["v"]),
        bk=lambda rt, ctx, b, K, R, C: bufkern.rows_scatter_add(b["mat"], b["v"], rows=R, cols=C, indices=b["h_idx"], ctx=ctx),
        scale=lambda rt, i, ref, K, R, C: rt.max_abs(ref) + 4.0 * K / R,
        bytes=lambda es, K, R, C: (2 * R * C + K * C) * es + K * 8, note="clone+index_add_")

    # -- vectors -----------------------------------------------------------------------------------------
    half = 128 * 2**20 // ES[dtype]
    add(nm("concat_1d_2x128MiB") if dtype == "f32" else "concat_1d_2x128MiB_f64", "concat", (half, half), (1000, 777),
        make=lambda rt, dt, N, M: {"a": rt.randn((N,), dt), "b": rt.randn((M,), dt)},
        aten=lambda rt, i, N, M: torch.cat([i["a"], i["b"]]),
        bk=lambda rt, ctx, b, N, M: bufkern.vec_concat(b["a"], b["b"], n=N, m=M, ctx=ctx),
        check="exact", bytes=lambda es, N, M: 2 * (N + M) * es)
    q = 64 * 2**20 // ES[dtype]
    add(nm("slice_1d_64MiB") if dtype == "f32" else "slice_1d_64MiB_f64", "slice", (4 * q, q + 3, q), (1000, 101, 333),
        make=lambda rt, dt, N, S, L: {"x": rt.randn((N,), dt)},
        aten=lambda rt, i, N, S, L: i["x"][S:S + L].clone(),
        bk=lambda rt, ctx, b, N, S, L: bufkern.vec_slice(b["x"], n=N, start=S, length=L, ctx=ctx),
        check="exact", bytes=lambda es, N, S, L: 2 * L * es)

    # -- convolutions ---------------------------------------------------------------------------------------
    def make_conv2d(rt, dt, Nb, C, H, W, G, K):
        x = rt.randn((Nb, C, H, W), dt)
        w = rt.randn((C, C // G, K, K), dt, 1.0 / math.sqrt(C // G * K * K))
        dense = rt.zeros((C, C, K, K), dt)
        cg = C // G
        for g in range(G):
            dense[g * cg:(g + 1) * cg, g * cg:(g + 1) * cg] = w[g * cg:(g + 1) * cg]
        return {"x": x, "t_w": w, "w": dense, "bias": rt.randn((C,), dt)}

    # Asymmetric zero padding: (H, W) before (1, 3), after (3, 1); dilation 2.
    def aten_conv2d(rt, i, Nb, C, H, W, G, K):
        return F.conv2d(F.pad(i["x"], (3, 1, 1, 3)), i["t_w"], i["bias"], stride=1, dilation=2, groups=G)

    def bk_conv2d(rt, ctx, b, Nb, C, H, W, G, K):
        return bufkern.conv(b["x"], b["w"], b["bias"], input_dims=(Nb, C, H, W), kernel_dims=(C, C, K, K), stride=(1, 1),
                            pad_before=(1, 3), pad_after=(3, 1), dilation=(2, 2), groups=G, ctx=ctx)

    def conv2d_scale(rt, i, ref, Nb, C, H, W, G, K):
        if not rt.is_torch:
            return rt.max_abs(ref)
        return rt.max_abs(F.conv2d(F.pad(i["x"].abs(), (3, 1, 1, 3)), i["t_w"].abs(), i["bias"].abs(),
                                   stride=1, dilation=2, groups=G))

    def conv2d_flops(Nb, C, H, W, G, K):
        ho, wo = H + 4 - (2 * (K - 1) + 1) + 1, W + 4 - (2 * (K - 1) + 1) + 1
        return 2 * Nb * C * ho * wo * (C // G) * K * K

    add(nm("conv2d_grouped8_dil2_asympad_32x256x56x56_f32"), "conv2d", (32, 256, 56, 56, 8, 3),
        (2, 16, 9, 10, 8, 3), make=make_conv2d, aten=aten_conv2d, bk=bk_conv2d, check="contract",
        n=lambda Nb, C, H, W, G, K: C // G * K * K, scale=conv2d_scale, flops=conv2d_flops,
        note="pad+cudnn; bufkern takes the dense (C_out, C_in, k, k) kernel layout")

    def make_dw(rt, dt, Nb, C, L, K):
        x = rt.randn((Nb, C, L), dt)
        w = rt.randn((C, 1, K), dt, 0.5)
        dense = rt.zeros((C, C, K), dt)
        ar = rt.arange(C)
        dense[ar, ar] = w[:, 0, :]
        return {"x": x, "t_w": w, "w": dense, "bias": rt.randn((C,), dt)}

    def dw_scale(rt, i, ref, Nb, C, L, K):
        if not rt.is_torch:
            return rt.max_abs(ref)
        return rt.max_abs(F.conv1d(F.pad(i["x"].abs(), (K - 1, 0)), i["t_w"].abs(), i["bias"].abs(), groups=C))

    add(nm("conv1d_depthwise_k4_causal_16x4096x2048") if dtype == "f32" else "conv1d_depthwise_k4_causal_16x4096x2048_f64",
        "conv1d_dw", (16, 4096, 2048, 4), (2, 12, 30, 4),
        make=make_dw,
        aten=lambda rt, i, Nb, C, L, K: F.conv1d(F.pad(i["x"], (K - 1, 0)), i["t_w"], i["bias"], groups=C),
        bk=lambda rt, ctx, b, Nb, C, L, K: bufkern.conv(b["x"], b["w"], b["bias"], input_dims=(Nb, C, L), kernel_dims=(C, C, K),
                                                      stride=(1,), pad_before=(K - 1,), pad_after=(0,), dilation=(1,), groups=C, ctx=ctx),
        check="contract", n=lambda Nb, C, L, K: K, scale=dw_scale,
        bytes=lambda es, Nb, C, L, K: (2 * Nb * C * L + C * K + C) * es,
        note="mamba-style causal depthwise; bytes count the grouped weights")

    # -- cross-entropies --------------------------------------------------------------------------------------
    def make_xent(rt, dt, R, C):
        return {"x": rt.randn((R, C), dt, 2.0), "w": rt.uniform((R, C), dt, 0.0, 2.0 / C)}

    add(nm("xent_weighted_mean_8192x32768") if dtype == "f32" else "xent_weighted_mean_8192x32768_f64",
        "xent_weighted", (8192, 32768), (32, 96),
        make=make_xent,
        aten=lambda rt, i, R, C: (i["w"] * (torch.logsumexp(i["x"], 1, keepdim=True) - i["x"])).sum() / R,
        bk=lambda rt, ctx, b, R, C: bufkern.xent_weighted_mean(b["x"], b["w"], rows=R, cols=C, ctx=ctx),
        bytes=lambda es, R, C: (2 * R * C + 1) * es)

    def make_teacher(rt, dt, R, C):
        return {"s": rt.randn((R, C), dt, 2.0), "t": rt.randn((R, C), dt, 2.0)}

    add(nm("xent_teacher_loss_8192x32768") if dtype == "f32" else "xent_teacher_loss_8192x32768_f64",
        "xent_teacher", (8192, 32768), (32, 96),
        make=make_teacher,
        aten=lambda rt, i, R, C: -(torch.softmax(i["t"], 1) * torch.log_softmax(i["s"], 1)).sum() / R,
        bk=lambda rt, ctx, b, R, C: bufkern.xent_teacher(b["s"], b["t"], rows=R, cols=C, ctx=ctx),
        bytes=lambda es, R, C: (2 * R * C + 1) * es)
    add(nm("xent_teacher_grad_8192x32768") if dtype == "f32" else "xent_teacher_grad_8192x32768_f64",
        "xent_teacher_grad", (8192, 32768), (32, 96),
        make=make_teacher,
        aten=lambda rt, i, R, C: (torch.softmax(i["s"], 1) - torch.softmax(i["t"], 1)) / R,
        bk=lambda rt, ctx, b, R, C: bufkern.xent_teacher(b["s"], b["t"], rows=R, cols=C, gradient=True, ctx=ctx),
        scale=lambda rt, i, ref, R, C: 1.0 / R, bytes=lambda es, R, C: 3 * R * C * es)

    # -- sweeps -------------------------------------------------------------------------------------------------
    total = 2**24 if quick else 2**26
    widths = [32, 1024, 32768, 262144] if quick else [2**k for k in range(5, 19)]
    dry_widths = [32, 256, 2048]
    sweep_families = {
        "rows_sum": (lambda rt, dt, R, C: {"x": rt.randn((R, C), dt)},
                     lambda rt, i, R, C: i["x"].sum(1),
                     lambda rt, ctx, b, R, C: bufkern.rows_sum(b["x"], rows=R, cols=C, ctx=ctx),
                     lambda es, R, C: (R * C + R) * es,
                     lambda rt, i, ref, R, C: rt.max_abs(abs(i["x"]).sum(1))),
        "softmax": (lambda rt, dt, R, C: {"x": rt.randn((R, C), dt, 3.0)},
                    lambda rt, i, R, C: torch.softmax(i["x"], -1),
                    lambda rt, ctx, b, R, C: bufkern.softmax(b["x"], dims=(R, C), axis=1, ctx=ctx),
                    lambda es, R, C: 2 * R * C * es, lambda *a: 1.0),
        "masked_softmax": (lambda rt, dt, R, C: {"s": rt.randn((R, C), dt, 3.0), "m": rt.bernoulli((R, C), dt, 0.5)},
                           aten_masked_softmax,
                           lambda rt, ctx, b, R, C: bufkern.rows_masked_softmax(b["s"], b["m"], rows=R, cols=C, ctx=ctx),
                           lambda es, R, C: 3 * R * C * es, lambda *a: 1.0),
        "layernorm_fwd": (make_ln, aten_ln_fwd,
                          lambda rt, ctx, b, R, C: bufkern.layernorm_forward(b["x"], b["g"], b["b"], rows=R, cols=C, eps=1e-5, ctx=ctx),
                          lambda es, R, C: (3 * R * C + 2 * C + R) * es, ln_fwd_scale),
    }
    for fam, (mk, at, bkf, by, sc) in sweep_families.items():
        for i, C in enumerate(widths):
            R = max(1, total // C)
            dC = dry_widths[min(i, len(dry_widths) - 1)]
            add(f"sweep_{fam}_{R}x{C}_{dtype}", f"sweep_{fam}", (R, C), (max(1, 4096 // dC), dC),
                make=mk, aten=at, bk=bkf, bytes=by, scale=sc, sweep_x=lambda R, C: C, perf=False)

    bmm_shapes = [(64, 1024, 1024, 1024, 0), (1, 4096, 4096, 4096, 0), (8, 2048, 2048, 2048, 0),
                  (256, 256, 256, 256, 0), (4096, 64, 64, 64, 0), (16384, 32, 32, 32, 0),
                  (256, 1024, 64, 1024, 1), (256, 1024, 1024, 64, 0)]
    if quick:
        bmm_shapes = [bmm_shapes[1], bmm_shapes[3], bmm_shapes[6]]
    for Bt, M, N, P, tb in bmm_shapes:
        tag = "_BT" if tb else ""
        bmm_case(f"sweep_bmm_{Bt}x{M}x{N}x{P}{tag}_{dtype}", "sweep_bmm", (Bt, M, N, P), (2, 8, 12, 4 + tb),
                 0, tb, sweep_x=lambda Bt, M, N, P: 2 * Bt * M * N * P, perf=False)
    return cases


# ---------------------------------------------------------------------------
# Running a case
# ---------------------------------------------------------------------------


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _split_flags(outs):
    """Buffers/arrays, and the bool flags (bmm_scaled's range loss) apart."""
    return [o for o in outs if not isinstance(o, bool)], [o for o in outs if isinstance(o, bool)]


def _upcast(rt, inp):
    return {k: (rt.f64(v) if rt.is_float(v) and not k.startswith("h_") else v) for k, v in inp.items()}


def _to_bk(rt, inp):
    out = {}
    for k, v in inp.items():
        if k.startswith("t_") or k.startswith("h_") or not rt.is_array(v):
            out[k] = v
            continue
        b = rt.to_bk(v)
        if rt.nbytes(v) and b.data_ptr != rt.data_ptr(v):
            raise RuntimeError(f"input {k} was copied on import (zero-copy expected)")
        out[k] = b
    return out


def run_case(rt, case, args, copy_gbs):
    res = {"name": case.name, "family": case.family, "dtype": case.dtype, "note": case.note,
           "perf_case": case.perf, "status": "ok"}
    dims = case.dry if args.dry_run else case.dims
    res["dims"] = list(dims)
    res["sweep_x"] = case.sweep_x(*dims) if case.sweep_x else None
    es = ES[case.dtype]
    res["bytes"] = case.bytes_fn(es, *dims) if case.bytes_fn else None
    res["flops"] = case.flops_fn(*dims) if case.flops_fn else None

    first = case.make_fn(rt, case.dtype, *dims)
    in_bytes = sum(rt.nbytes(v) for k, v in first.items() if rt.is_array(v) and not k.startswith("t_"))
    nrot = 1
    if in_bytes and in_bytes < rt.l2_bytes:
        nrot = int(min(64, math.ceil(3 * rt.l2_bytes / in_bytes)))
    res["rotations"] = nrot
    sets = [first] + [case.make_fn(rt, case.dtype, *dims) for _ in range(nrot - 1)]
    bsets = [_to_bk(rt, s) for s in sets]

    # Agreement first, on the first input set.
    bk_out, flags_bk = _split_flags(_tuple(case.bk_fn(rt, rt.ctx, bsets[0], *dims)))
    inp64 = _upcast(rt, first)
    if rt.is_torch:
        ref = case.ref_fn(rt, inp64, *dims) if case.ref_fn else case.aten_fn(rt, inp64, *dims)
    else:
        ref = case.bk_fn(rt, rt.ctx, _to_bk(rt, inp64), *dims)
    ref, flags_ref = _split_flags(_tuple(ref))
    ref = [r if rt.is_array(r) else rt.from_bk(r, r.shape) for r in ref]
    ref = [rt.as_f64(r) for r in ref]
    if len(ref) != len(bk_out):
        raise RuntimeError(f"{len(bk_out)} bufkern outputs but {len(ref)} reference outputs")
    exact = case.check == "exact"
    scale = None
    if not exact:
        scale = case.scale_fn(rt, inp64, ref if len(ref) > 1 else ref[0], *dims) if case.scale_fn else \
            max(rt.max_abs(r) for r in ref)
        scale = max(float(scale), 1e-300)
        n = case.n_fn(*dims) if case.n_fn else 1
        tol = TOL[case.check][case.dtype] * scale * (math.sqrt(n) if case.check == "contract" else 1.0)
    else:
        tol = 0.0
    worst, problems = 0.0, []
    for j, (b, r) in enumerate(zip(bk_out, ref)):
        got = rt.as_f64(rt.from_bk(b, rt.shape(r)))
        err, why = rt.compare(got, r, exact)
        worst = max(worst, err)
        if why:
            problems.append(f"output {j}: {why}")
        elif err > tol:
            problems.append(f"output {j}: max error {err:.3e} > tolerance {tol:.3e}")
    res.update({"check": case.check, "bk_err": worst, "tol": tol, "scale": scale})
    if flags_bk or flags_ref:
        res["flags"] = {"bufkern": flags_bk, "reference": flags_ref}
    # The ATen composition's own error, for information only.
    if rt.is_torch:
        try:
            a_out, _ = _split_flags(_tuple(case.aten_fn(rt, first, *dims)))
            a_err = 0.0
            for a, r in zip(a_out, ref):
                e, why = rt.compare(rt.as_f64(a.reshape(rt.shape(r))), r, exact)
                a_err = max(a_err, math.inf if why else e)
            res["aten_err"] = a_err
            del a_out
        except Exception as exc:  # the ATen side failing is reported, bufkern still timed
            res["aten_error"] = f"{type(exc).__name__}: {exc}"
    del bk_out, ref, inp64
    rt.free()
    if problems:
        res["status"] = "MISMATCH"
        res["mismatch"] = "; ".join(problems)
        return res

    warm, reps = (2, 5) if args.quick else (3, args.repeats)
    target = getattr(args, "sample_ms", None) or (0.5 if args.quick else 2.0)

    def bk_call(k):
        return case.bk_fn(rt, rt.ctx, bsets[k % nrot], *dims)

    def aten_call(k):
        return case.aten_fn(rt, sets[k % nrot], *dims)

    if getattr(rt, "interleaved", False):
        # The CPU: every side's samples in turn, numpy too where it has a composition.
        fns = {"bk": bk_call}
        if "aten_error" not in res:
            fns["aten"] = aten_call
        np_fn = NUMPY.get(case.family)
        if np_fn is not None and not any(k.startswith("h_") for k in first):
            fns["np"] = lambda k: np_fn(sets[k % nrot], *dims)
        # A warm copy of the case's bytes (half read, half written) as one more side, so the
        # fraction of copy compares samples taken under the same load.
        pair = []
        if res["bytes"]:
            pair = [torch.ones(max(1, int(res["bytes"]) // 2), dtype=torch.uint8)]
            pair.append(torch.zeros_like(pair[0]))
            fns["copy"] = lambda k: pair[1].copy_(pair[0])
        for side, (ms, samples, inner) in rt.time_sides(fns, warm, reps, target).items():
            res.update({f"{side}_ms": ms, f"{side}_min_ms": samples[0], f"{side}_inner": inner,
                        f"{side}_spread": [samples[0], samples[-1]]})
        pair.clear()
    else:
        ms, samples, inner = rt.time(bk_call, warm, reps, target)
        res.update({"bk_ms": ms, "bk_inner": inner, "bk_spread": [samples[0], samples[-1]]})
        if rt.is_torch and "aten_error" not in res:
            ms, samples, inner = rt.time(aten_call, warm, reps, target)
            res.update({"aten_ms": ms, "aten_inner": inner, "aten_spread": [samples[0], samples[-1]]})
    for side in ("bk", "aten", "np"):
        t = res.get(f"{side}_ms")
        if t is None:
            continue
        if res["bytes"]:
            gbs = res["bytes"] / (t * 1e-3) / 1e9
            res[f"{side}_gbs"] = gbs
            res[f"{side}_frac_copy"] = gbs / copy_gbs if copy_gbs else None
            if res.get("copy_ms"):  # the same-sample copy of the CPU runs
                res[f"{side}_frac_copy"] = res["copy_ms"] / t
        if res["flops"]:
            res[f"{side}_tflops"] = res["flops"] / (t * 1e-3) / 1e12
    if res.get("aten_ms") and res.get("bk_ms"):
        res["speedup"] = res["aten_ms"] / res["bk_ms"]
    if res.get("np_ms") and res.get("bk_ms"):
        res["speedup_np"] = res["np_ms"] / res["bk_ms"]
    if res.get("aten_min_ms") and res.get("bk_min_ms"):
        res["speedup_min"] = res["aten_min_ms"] / res["bk_min_ms"]
    return res


def measure_latency(rt, args):
    """Per-call host overhead from Python: N calls, one synchronization."""
    calls = 1000 if args.quick else 10000
    out = []
    specs = [
        ("softmax_8x8_latency",
         lambda: {"x": rt.randn((8, 8), "f32")},
         lambda i: torch.softmax(i["x"], -1),
         lambda b: bufkern.softmax(b["x"], dims=(8, 8), axis=1, ctx=rt.ctx)),
        ("bmm_4x16^3_latency",
         lambda: {"a": rt.randn((4, 16, 16), "f32"), "b": rt.randn((4, 16, 16), "f32")},
         lambda i: torch.bmm(i["a"], i["b"]),
         lambda b: bufkern.bmm(b["a"], b["b"], batch=4, m=16, n=16, p=16, ctx=rt.ctx)),
    ]
    for name, make, aten, bk in specs:
        if args.filter and not re.search(args.filter, name):
            continue
        res = {"name": name, "calls": calls, "status": "ok"}
        try:
            inp = make()
            b = _to_bk(rt, inp)
            sides = [("bk", lambda: bk(b))]
            if rt.is_torch:
                sides.append(("aten", lambda: aten(inp)))
            for side, fn in sides:
                for _ in range(100):
                    fn()
                rt.sync()
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                rt.sync()
                res[f"{side}_us"] = (time.perf_counter() - t0) / calls * 1e6
        except Exception as exc:
            res["status"] = "ERROR"
            res["error"] = f"{type(exc).__name__}: {exc}"
            res["traceback"] = traceback.format_exc()
        out.append(res)
    return out


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------


def _fmt(v, spec):
    return "" if v is None else format(v, spec)


def write_markdown(path, meta, results, latency):
    lines = [
        "# bufkern vs ATen",
        "",
        f"Device: {meta['device_name']}; torch {meta.get('torch', '-')}; bufkern {meta['bufkern_version']}; "
        f"{meta['date']}.",
        f"Copy bandwidth in this run: **{meta['copy_gbs']:.0f} GB/s** ({meta['copy_bytes'] // 2**20} MiB "
        "device-to-device copy, bytes read + written). Times are medians of CUDA-event-timed repeats "
        "after warm-up; \"% of copy\" is the fewest bytes the primitive must move over its time, divided "
        "by the copy bandwidth. TF32 off." + (" **Dry run: CPU, tiny shapes, bufkern only.**" if meta["dry_run"] else ""),
        "",
        "| case | ATen ms | bufkern ms | speedup | bufkern GB/s or TFLOP/s | bufkern % of copy | ATen % of copy "
        "| max err / tol | ATen composition |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"| `{r['name']}` | | | | | | | **{r['status']}** | "
                         f"{(r.get('mismatch') or r.get('error') or '').replace('|', '/')[:200]} |")
            continue
        rate = ""
        if r.get("bk_tflops") is not None:
            rate = f"{r['bk_tflops']:.1f} TFLOP/s"
        elif r.get("bk_gbs") is not None:
            rate = f"{r['bk_gbs']:.0f} GB/s"
        bk_frac = r.get("bk_frac_copy")
        at_frac = r.get("aten_frac_copy")
        if r["check"] == "exact":
            err = "exact" if r["bk_err"] == 0 else f"{int(r['bk_err'])} differ"
        else:
            err = f"{r['bk_err']:.1e} / {r['tol']:.1e}"
        note = r.get("note", "")
        if r.get("aten_error"):
            note = f"ATen failed: {r['aten_error']}"
        lines.append(
            f"| `{r['name']}` | {_fmt(r.get('aten_ms'), '.3f')} | {_fmt(r.get('bk_ms'), '.3f')} | "
            f"{_fmt(r.get('speedup'), '.2f')}{'x' if r.get('speedup') else ''} | {rate} | "
            f"{'' if bk_frac is None else f'{100 * bk_frac:.0f}%'} | "
            f"{'' if at_frac is None else f'{100 * at_frac:.0f}%'} | {err} | {note} |")
    if latency:
        lines += ["", "Per-call host overhead from Python (calls in a loop, one synchronization at the end):", "",
                  "| case | calls | ATen us/call | bufkern us/call |", "|---|---|---|---|"]
        for r in latency:
            if r["status"] != "ok":
                lines.append(f"| `{r['name']}` | {r['calls']} | **ERROR** | {r.get('error', '')} |")
            else:
                lines.append(f"| `{r['name']}` | {r['calls']} | {_fmt(r.get('aten_us'), '.1f')} | "
                             f"{_fmt(r.get('bk_us'), '.1f')} |")
    bad = [r for r in results if r["status"] != "ok"]
    if bad:
        lines += ["", "Cases that did not run or disagreed:", ""]
        for r in bad:
            lines.append(f"- `{r['name']}`: {r['status']}: {r.get('mismatch') or r.get('error')}")
    Path(path).write_text("\n".join(lines) + "\n")


def write_plots(directory, meta, results):
    plt = sweep_shapes.pyplot()
    if plt is None:
        return []
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    ok = [r for r in results if r["status"] == "ok"]
    fams = sorted({r["family"] for r in ok if r["family"].startswith("sweep_") and r["family"] != "sweep_bmm"})
    for fam in fams:
        for dtype in sorted({r["dtype"] for r in ok if r["family"] == fam}):
            rows = sorted((r for r in ok if r["family"] == fam and r["dtype"] == dtype), key=lambda r: r["sweep_x"])
            if not rows:
                continue
            fig, ax = plt.subplots(figsize=(7, 4))
            xs = [r["sweep_x"] for r in rows]
            for side, label, style in (("bk", "bufkern", "o-"), ("aten", "ATen", "s--")):
                ys = [r.get(f"{side}_frac_copy") for r in rows]
                pts = [(x, 100 * y) for x, y in zip(xs, ys) if y is not None]
                if pts:
                    ax.plot(*zip(*pts), style, label=label)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("row width (columns); total elements fixed")
            ax.set_ylabel("% of copy bandwidth")
            ax.set_ylim(bottom=0)
            ax.axhline(85, color="gray", lw=0.8, ls=":", label="85% target")
            ax.set_title(f"{fam[6:]} ({dtype}), copy = {meta['copy_gbs']:.0f} GB/s")
            ax.grid(True, alpha=0.3)
            ax.legend()
            p = d / f"{fam}_{dtype}.png"
            fig.tight_layout()
            fig.savefig(p, dpi=120)
            plt.close(fig)
            written.append(str(p))
    bmm = [r for r in ok if r["family"] in ("sweep_bmm", "bmm") and r.get("bk_tflops") is not None]
    if bmm:
        fig, ax = plt.subplots(figsize=(9, 4))
        labels = [r["name"].replace("sweep_bmm_", "").replace("bmm_", "") for r in bmm]
        x = np.arange(len(bmm))
        ax.bar(x - 0.2, [r["bk_tflops"] for r in bmm], 0.4, label="bufkern")
        ax.bar(x + 0.2, [r.get("aten_tflops") or 0 for r in bmm], 0.4, label="ATen (torch.bmm)")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("TFLOP/s")
        ax.set_title("batched matmul (TF32 off)")
        ax.legend()
        fig.tight_layout()
        p = d / "bmm.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        written.append(str(p))
    mem = [r for r in ok if r["perf_case"] and r.get("bk_frac_copy") is not None]
    if mem:
        fig, ax = plt.subplots(figsize=(10, max(4, 0.28 * len(mem))))
        y = np.arange(len(mem))
        ax.barh(y + 0.2, [100 * r["bk_frac_copy"] for r in mem], 0.4, label="bufkern")
        ax.barh(y - 0.2, [100 * (r.get("aten_frac_copy") or 0) for r in mem], 0.4, label="ATen")
        ax.set_yticks(y)
        ax.set_yticklabels([r["name"] for r in mem], fontsize=7)
        ax.invert_yaxis()
        ax.axvline(85, color="gray", lw=0.8, ls=":")
        ax.set_xlabel("% of copy bandwidth")
        ax.set_title(f"reference cases, copy = {meta['copy_gbs']:.0f} GB/s")
        ax.legend()
        fig.tight_layout()
        p = d / "perf_cases.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        written.append(str(p))
    return written


# ---------------------------------------------------------------------------
# Sweep: the shapes of `bufkern bench --sweep`, both sides in one process
# ---------------------------------------------------------------------------

# The primitives of the sweep whose ATen composition is one of the cases above: the family of
# that case, and the drawn fields that are its dims, in order.
RC = ("rows", "cols")
SWEEP_TEMPLATES = {
    "softmax": ("softmax", RC), "masked_softmax": ("masked_softmax", RC), "rows_sum": ("rows_sum", RC),
    "rows_max": ("rows_max", RC), "first_max_mask": ("first_max_mask", RC),
    "topk_mask": ("topk_mask", RC + ("k",)), "layernorm_fwd": ("layernorm_fwd", RC),
    "layernorm_bwd": ("layernorm_vjp", RC), "xent_weighted": ("xent_weighted", RC),
    "xent_teacher_loss": ("xent_teacher", RC), "xent_teacher_grad": ("xent_teacher_grad", RC),
    "softmax_mid": ("softmax_mid", ("outer", "n", "inner")), "sum_axis": ("sum_axis", ("outer", "n", "inner")),
    "slice": ("slice", ("n", "start", "len")), "concat": ("concat", ("n", "m")),
    "gather": ("gather", ("k",) + RC), "scatter_add": ("scatter_add", ("k",) + RC),
    "scan_diag": ("scan_shared", ("T", "S")), "scan_diag_var": ("scan_var", ("T", "S")),
    "scan_diag_bwd": ("scan_shared_bwd", ("T", "S")), "scan_diag_var_bwd": ("scan_var_bwd", ("T", "S")),
    "rfft": ("rfft", ("batch", "n")), "irfft": ("irfft", ("batch", "n")),
}


def _prod(v):
    p = 1
    for x in v:
        p *= x
    return p


def _topk_exact(rt, i, R, C, k):
    """The top-k mask with the contract's ties (the lower index wins), from torch.topk's k-th
    value: every entry above it, then the first entries equal to it, as many as are missing."""
    x = i["x"]
    thr = torch.topk(x, k, dim=1).values[:, -1:]
    gt, eq = x > thr, x == thr
    need = k - gt.sum(1, keepdim=True)
    return (gt | (eq & (eq.cumsum(1) <= need))).to(x.dtype)


def _broadcast_view(x, in_dims, out_dims, amap):
    """x (in_dims) as a view of rank len(out_dims) that expands to out_dims: its axes in the
    order the output reads them, extent 1 at inserted axes."""
    order = [a - 1 for a in amap if a]
    shape = [in_dims[a - 1] if a else 1 for a in amap]
    return x.reshape(in_dims).permute(order).reshape(shape) if order else x.reshape(shape)


def _broadcast_adjoint_aten(x, in_dims, out_dims, amap):
    """Sum over the inserted and the broadcast output axes, then the input's axis order."""
    red = [j for j, a in enumerate(amap) if a == 0 or (in_dims[a - 1] == 1 and out_dims[j] != 1)]
    g = x.reshape(out_dims)
    g = g.sum(red, keepdim=True) if red else g
    order = [a - 1 for a in amap if a]
    g = g.reshape([out_dims[j] if in_dims[a - 1] != 1 else 1 for j, a in enumerate(amap) if a])
    inverse = sorted(range(len(order)), key=lambda t: order[t])
    return g.permute(inverse).contiguous() if order else g.reshape(())


def _conv_pads(pb, pa):
    """F.pad's order: the last spatial axis first, (before, after) each."""
    out = []
    for b, a in zip(reversed(pb), reversed(pa)):
        out += [b, a]
    return out


def _sweep_new_case(s, dtype, name):
    """The primitives whose sweep geometry no fixed case covers: general broadcasts, swaps of any
    rank, the unnormalized inverse FFT, convolutions of 1-3 spatial axes. The geometry goes to
    bufkern by keyword, with flat inputs where a geometry is given."""
    p = s.prim
    if p in ("broadcast_to", "broadcast_adjoint"):
        ind, outd, amap = tuple(s["in"]), tuple(s["out"]), tuple(s["map"])
        bytes_ = lambda es, *d: (_prod(ind) + _prod(outd)) * es  # noqa: E731
        if p == "broadcast_to":
            return Case(name, p, (), (), dtype=dtype, perf=False, check="exact", bytes=bytes_,
                        make=lambda rt, dt: {"x": rt.randn((_prod(ind),), dt)},
                        aten=lambda rt, i: _broadcast_view(i["x"], ind, outd, amap).expand(outd)
                        .contiguous().reshape(-1),
                        bk=lambda rt, ctx, b: bufkern.broadcast_to(b["x"], in_dims=ind, out_dims=outd,
                                                                    axis_map=amap, ctx=ctx))
        return Case(name, p, (), (), dtype=dtype, perf=False, bytes=bytes_,
                    make=lambda rt, dt: {"g": rt.randn((_prod(outd),), dt)},
                    aten=lambda rt, i: _broadcast_adjoint_aten(i["g"], ind, outd, amap).reshape(-1),
                    bk=lambda rt, ctx, b: bufkern.broadcast_to_adjoint(b["g"], in_dims=ind, out_dims=outd,
                                                                        axis_map=amap, ctx=ctx),
                    scale=lambda rt, i, ref: rt.max_abs(
                        _broadcast_adjoint_aten(abs(i["g"]), ind, outd, amap)) if rt.is_torch
                    else rt.max_abs(ref))
    if p == "swap_adjacent":
        dims, d = tuple(s["dims"]), s["depth"]
        return Case(name, p, (), (), dtype=dtype, perf=False, check="exact",
                    bytes=lambda es: 2 * _prod(dims) * es,
                    make=lambda rt, dt: {"x": rt.randn((_prod(dims),), dt)},
                    aten=lambda rt, i: i["x"].reshape(dims).transpose(d, d + 1).contiguous(),
                    bk=lambda rt, ctx, b: bufkern.swap_adjacent(b["x"], dims=dims, depth=d, ctx=ctx))
    if p == "irfft_unnormalized":
        return Case(name, p, (s["batch"], s["n"]), (s["batch"], s["n"]), dtype=dtype, perf=False,
                    make=lambda rt, dt, Bt, N: {"s": rt.rfft_packed(rt.randn((Bt, N), dt))},
                    aten=lambda rt, i, Bt, N: torch.fft.irfft(torch.view_as_complex(i["s"]), n=N, dim=-1,
                                                              norm="forward"),
                    bk=lambda rt, ctx, b, Bt, N: bufkern.irfft_unnormalized(b["s"], batch=Bt, n=N, ctx=ctx),
                    check="contract", n=lambda Bt, N: N,
                    scale=lambda rt, i, ref, Bt, N: rt.max_abs(abs(i["s"]).sum((-1, -2))) * 2,
                    bytes=lambda es, Bt, N: (Bt * N + Bt * (N // 2 + 1) * 2) * es)
    if p == "conv":
        return _sweep_conv_case(s, dtype, name)
    raise ValueError(f"no ATen composition for {p}")


def _sweep_conv_case(s, dtype, name):
    nb, cin, cout, g = s["N"], s["cin"], s["cout"], s["groups"]
    sp, ks, st, pb, pa, dil = (tuple(s[k]) for k in ("in", "k", "stride", "pad_before", "pad_after", "dil"))
    sr, prodk, out = len(sp), _prod(ks), sweep_shapes.conv_out(s)
    idims, kdims = (nb, cin) + sp, (cout, cin) + ks

    def make(rt, dt):
        w = rt.randn((cout, cin // g) + ks, dt, 1.0 / math.sqrt(cin // g * prodk))
        dense = rt.zeros(kdims, dt)
        ar = rt.arange(g)
        dense.reshape((g, cout // g, g, cin // g) + ks)[ar, :, ar] = w.reshape((g, cout // g, cin // g) + ks)
        return {"x": rt.randn(idims, dt), "t_w": w, "w": dense, "bias": rt.randn((cout,), dt)}

    def aten(rt, i, absolute=False):
        conv = (F.conv1d, F.conv2d, F.conv3d)[sr - 1]
        x, w, b = (abs(i[k]) if absolute else i[k] for k in ("x", "t_w", "bias"))
        return conv(F.pad(x, _conv_pads(pb, pa)), w, b, stride=st, dilation=dil, groups=g)

    return Case(name, "conv", (), (), dtype=dtype, perf=False, make=make, aten=aten,
                bk=lambda rt, ctx, b: bufkern.conv(b["x"], b["w"], b["bias"], input_dims=idims, kernel_dims=kdims,
                                                   stride=st, pad_before=pb, pad_after=pa, dilation=dil,
                                                   groups=g, ctx=ctx),
                check="contract", n=lambda: cin // g * prodk,
                scale=lambda rt, i, ref: rt.max_abs(aten(rt, i, True)) if rt.is_torch else rt.max_abs(ref),
                bytes=lambda es: (nb * cin * _prod(sp) + nb * cout * _prod(out) + cout * (cin // g) * prodk
                                  + cout) * es,
                flops=lambda: 2 * nb * cout * _prod(out) * (cin // g) * prodk)


def sweep_cases(shapes, dtype):
    """One Case per drawn shape: the fixed case's composition at the drawn dims, or a new one."""
    templates = {}
    for c in _cases_for(dtype, True):
        templates.setdefault(c.family, c)
    cases = []
    for s in shapes:
        name = f"{s.prim}_{dtype}_{sweep_shapes.CLASSES[s.klass][0]}_{s.index}"
        if s.prim not in SWEEP_TEMPLATES:
            cases.append(_sweep_new_case(s, dtype, name))
            continue
        fam, keys = SWEEP_TEMPLATES[s.prim]
        t, dims = templates[fam], tuple(s[k] for k in keys)
        ref = _topk_exact if s.prim == "topk_mask" else t.ref_fn
        cases.append(Case(name, t.family, dims, dims, t.make_fn, t.aten_fn, t.bk_fn, check=t.check,
                          bytes=t.bytes_fn, flops=t.flops_fn, ref=ref, scale=t.scale_fn, n=t.n_fn,
                          note=t.note, dtype=dtype, perf=False))
    return cases


def sweep_main(args):
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"# seed {seed}" if args.list_only else f"seed: {seed}", flush=True)
    dtype = "f64" if args.f64 else "f32"
    try:
        families = sweep_shapes.parse_families(args.family)
    except ValueError as exc:
        print(f"vs_torch: {exc}", file=sys.stderr)
        return 2
    max_bytes = args.max_bytes or (2**20 if args.dry_run else None)
    shapes = sweep_shapes.shapes(seed, args.count, dtype, families, max_bytes)
    if args.list_only:
        for s in shapes:
            print(s.line())
        return 0
    started = start_runtime(args)
    if started is None:
        return 2
    rt, meta, copy_gbs = started
    meta.update({"sweep_seed": seed, "dtype": dtype, "count": args.count, "max_bytes": max_bytes})
    print(f"device: {rt.name}; copy bandwidth {copy_gbs:.0f} GB/s; {len(shapes)} shapes", flush=True)
    # Both sides: three samples of back-to-back calls, together about --target-ms each, as the
    # C harness times.
    args.repeats, args.sample_ms = 3, args.target_ms / 3
    results = []
    for s, c in zip(shapes, sweep_cases(shapes, dtype)):
        x_name, x = sweep_shapes.plot_x(s)
        label = f"{s.prim} {dtype} {sweep_shapes.CLASSES[s.klass][0]} {s.index}"
        r = run_and_print(rt, c, args, copy_gbs, label=label)
        r.update({"primitive": s.prim, "sweep_family": s.family, "class": sweep_shapes.CLASSES[s.klass][0],
                  "index": s.index, "shape": s.line().split(" ", 4)[4], "x": x, "x_name": x_name})
        results.append(r)
    meta["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "shapes": results}, indent=1, default=str))
    if args.md:
        write_sweep_markdown(args.md, meta, results)
    if args.device == "cpu":
        print_cpu_summary(meta, results)
    bad = [r for r in results if r["status"] != "ok"]
    slower = [r for r in results if r.get("speedup") is not None and r["speedup"] < 1]
    print(f"{len(results) - len(bad)}/{len(results)} shapes ok; {len(bad)} failed or disagreed; "
          f"{len(slower)} slower than ATen", flush=True)
    return 1 if bad else 0


def _geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def print_cpu_summary(meta, results):
    """Per primitive over the sweep: min / median / geomean of bufkern's fraction of the copy
    bandwidth and of its speedup over PyTorch and numpy (time ratios of the medians; above 1:
    bufkern faster), and how many shapes were slower than PyTorch."""
    print(f"\nload average before {meta.get('load_before')}, after {meta.get('load_after')}")
    print(f"{'primitive':22s} {'n':>3s} {'% of copy min/med/geo':>24s} {'vs torch min/med/geo':>22s} "
          f"{'slower':>6s} {'vs numpy min/med':>17s}")
    prims = dict.fromkeys(r.get("primitive") for r in results)
    for p in prims:
        rs = [r for r in results if r.get("primitive") == p and r["status"] == "ok"]
        fr = sorted(r["bk_frac_copy"] for r in rs if r.get("bk_frac_copy"))
        sp = sorted(r["speedup"] for r in rs if r.get("speedup"))
        sn = sorted(r["speedup_np"] for r in rs if r.get("speedup_np"))
        f3 = (f"{100 * fr[0]:5.0f} {100 * np.median(fr):5.0f} {100 * _geomean(fr):5.0f}%" if fr else "-")
        s3 = f"{sp[0]:5.2f} {np.median(sp):5.2f} {_geomean(sp):5.2f}" if sp else "-"
        n2 = f"{sn[0]:5.2f} {np.median(sn):5.2f}" if sn else "-"
        print(f"{p:22s} {len(rs):3d} {f3:>24s} {s3:>22s} {sum(x < 1 for x in sp):6d} {n2:>17s}")


def write_sweep_markdown(path, meta, results):
    lines = [f"# bufkern vs ATen at the sweep's shapes (seed {meta['sweep_seed']}, {meta['dtype']})", "",
             f"Device: {meta['device_name']}; torch {meta.get('torch', '-')}; copy bandwidth in this run "
             f"{meta['copy_gbs']:.0f} GB/s.", "",
             "| primitive | class | # | shape | bufkern ms | ATen ms | speedup | bufkern % of copy | ATen % of copy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["status"] != "ok":
            lines.append(f"| {r['primitive']} | {r['class']} | {r['index']} | `{r['shape']}` | "
                         f"**{r['status']}** | | | | |")
            continue
        bk, at = r.get("bk_frac_copy"), r.get("aten_frac_copy")
        lines.append(f"| {r['primitive']} | {r['class']} | {r['index']} | `{r['shape']}` | "
                     f"{_fmt(r.get('bk_ms'), '.4f')} | {_fmt(r.get('aten_ms'), '.4f')} | "
                     f"{_fmt(r.get('speedup'), '.2f')} | {'' if bk is None else f'{100 * bk:.0f}%'} | "
                     f"{'' if at is None else f'{100 * at:.0f}%'} |")
    Path(path).write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the results as JSON to this file")
    p.add_argument("--md", help="write a markdown table to this file")
    p.add_argument("--plots", help="write PNG plots into this directory")
    p.add_argument("--quick", action="store_true", help="fewer repeats and sweep points")
    p.add_argument("--filter", help="regular expression: run only the matching case names")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU, no torch: bufkern side only, on the CPU, with tiny shapes")
    p.add_argument("--dtype", choices=["f32", "f64", "both"], default="f32",
                   help="float32 cases (the reference names; bmm has f64 cases too), float64 variants, or both")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats per case (median)")
    p.add_argument("--no-sweeps", action="store_true", help="only the reference cases")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    g = p.add_argument_group("sweep", "--sweep: shapes drawn at random from a seed, the same as "
                             "`bufkern bench --sweep` draws (bench/sweep_shapes.py)")
    g.add_argument("--sweep", action="store_true", help="time the sweep's shapes instead of the cases")
    g.add_argument("--seed", type=int, help="the shapes' seed (default: a fresh one, printed first)")
    g.add_argument("--f64", action="store_true", help="float64 shapes instead of float32")
    g.add_argument("--count", type=int, default=40,
                   help="large shapes per primitive (default 40); half as many medium ones")
    g.add_argument("--family", help="comma-separated primitives or families (row, axis, layout, "
                   "index, scan, fft, conv)")
    g.add_argument("--max-bytes", type=int, help="scale every drawn size down to inputs of at most "
                   "this many bytes (default with --dry-run: 1 MiB)")
    g.add_argument("--target-ms", type=float, default=20.0,
                   help="timed milliseconds per shape and side (default 20, as the C harness)")
    g.add_argument("--list-only", action="store_true", help="print the shapes without timing them")
    return p.parse_args(argv)


def select_cases(args):
    dtypes = ["f32", "f64"] if args.dtype == "both" else [args.dtype]
    cases = []
    for dt in dtypes:
        cases += _cases_for(dt, args.quick)
    if args.dtype == "f32":
        # The ATen reference lists float64 bmm cases next to the float32 ones.
        cases += [c for c in _cases_for("f64", args.quick) if c.family == "bmm"]
    if args.no_sweeps:
        cases = [c for c in cases if c.perf]
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    return cases


def start_runtime(args):
    """(runtime, run metadata, copy GB/s) for the device of args; None when it cannot start."""
    global torch, F
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args), "dry_run": args.dry_run,
            "bufkern_version": bufkern.version(), "bufkern_library": bufkern.library_path(),
            "bufkern_build": bufkern.build_info(), "python": platform.python_version()}
    if args.dry_run:
        rt = NumpyRT()
        copy_bytes = 64 * 2**20
    else:
        try:
            import torch as _torch
            import torch.nn.functional as _F
        except ImportError as exc:
            print(f"vs_torch: torch is not importable ({exc}); use --dry-run to test without it",
                  file=sys.stderr)
            return None
        torch, F = _torch, _F
        if args.device == "cpu":
            rt = TorchCPURT()
            meta["torch"] = torch.__version__
            meta["threads"] = rt.threads
            meta["load_before"] = os.getloadavg()
            meta["device_name"] = rt.name
            meta["l2_bytes"] = rt.l2_bytes
            copy_bytes = 256 * 2**20
            copy_gbs, copy_ms = rt.copy_bandwidth(copy_bytes, 5 if args.quick else 10)
            meta.update({"copy_gbs": copy_gbs, "copy_ms": copy_ms, "copy_bytes": copy_bytes})
            return rt, meta, copy_gbs
        if not torch.cuda.is_available():
            print("vs_torch: torch.cuda.is_available() is False; use --dry-run on a CPU", file=sys.stderr)
            return None
        rt = TorchRT(args.device)
        meta["torch"] = torch.__version__
        meta["cuda"] = torch.version.cuda
        copy_bytes = 2**30
    meta["device_name"] = rt.name
    meta["l2_bytes"] = rt.l2_bytes
    copy_gbs, copy_ms = rt.copy_bandwidth(copy_bytes, 5 if args.quick else 20)
    meta.update({"copy_gbs": copy_gbs, "copy_ms": copy_ms, "copy_bytes": copy_bytes})
    return rt, meta, copy_gbs


def run_and_print(rt, c, args, copy_gbs, label=None):
    """Runs one case (a failure is recorded, not raised), frees its memory and prints its line."""
    t0 = time.perf_counter()
    try:
        r = run_case(rt, c, args, copy_gbs)
    except Exception as exc:
        r = {"name": c.name, "family": c.family, "dtype": c.dtype, "perf_case": c.perf,
             "sweep_x": None, "status": "ERROR", "error": f"{type(exc).__name__}: {exc}",
             "traceback": traceback.format_exc()}
    r["wall_s"] = time.perf_counter() - t0
    try:
        rt.free()
    except Exception as exc:  # a failed free usually means the device is in trouble: record it
        r.setdefault("error", f"cleanup failed: {exc}")
    line = f"{label or c.name:58s} {r['status']:8s}"
    if r["status"] == "ok":
        line += f" bufkern {r['bk_ms']:.4f} ms"
        if r.get("aten_ms") is not None:
            line += f"  ATen {r['aten_ms']:.4f} ms  x{r['speedup']:.2f}"
        if r.get("np_ms") is not None:
            line += f"  numpy {r['np_ms']:.4f} ms  x{r['speedup_np']:.2f}"
        if r.get("bk_frac_copy") is not None:
            line += f"  {100 * r['bk_frac_copy']:.0f}% of copy"
        if r.get("bk_tflops") is not None:
            line += f"  {r['bk_tflops']:.1f} TFLOP/s"
    else:
        line += " " + (r.get("mismatch") or r.get("error") or "")[:160]
    print(line, flush=True)
    return r


def main(argv=None):
    args = parse_args(argv)
    if args.sweep:
        return sweep_main(args)
    cases = select_cases(args)
    if args.list:
        for c in cases:
            print(c.name)
        return 0
    started = start_runtime(args)
    if started is None:
        return 2
    rt, meta, copy_gbs = started
    print(f"device: {rt.name}; copy bandwidth {copy_gbs:.0f} GB/s; {len(cases)} cases", flush=True)

    results = [run_and_print(rt, c, args, copy_gbs) for c in cases]

    latency = measure_latency(rt, args)
    for r in latency:
        print(f"{r['name']:58s} {r['status']:8s} bufkern {_fmt(r.get('bk_us'), '.1f')} us/call"
              f"  ATen {_fmt(r.get('aten_us'), '.1f')} us/call", flush=True)

    report = {"meta": meta, "cases": results, "latency": latency}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    if args.md:
        write_markdown(args.md, meta, results, latency)
    if args.plots:
        for p in write_plots(args.plots, meta, results):
            print(f"plot: {p}")
    failed = [r for r in results + latency if r["status"] != "ok"]
    print(f"{len(results) - len([r for r in results if r['status'] != 'ok'])}/{len(results)} cases ok; "
          f"{len(failed)} failed or disagreed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Row softmax across widths: bufkern against ATen in one process (lab driver).

    BUFKERN_LIBRARY=build-cuda/libbufkern.so python3 dev/cuda/softmax_widths.py \
        [--seed S] [--count N] [--mb 256] [--f64] [--masked]

Widths are drawn log-uniform over [1, 2^18] from a printed seed (about half
of them made odd, so rows are read element by element), plus every power of
two; rows are chosen so that the input holds --mb megabytes. Each side is
timed the same way: back-to-back calls between two CUDA events, inputs
rotated over enough copies to exceed L2, best of five such windows. The
copy baseline (torch clone of the same bytes) is taken in the same run.
Every bufkern result is checked against ATen's before timing. To compare
two builds, run it once per build (BUFKERN_LIBRARY) in the same device
session: the binding loads one library per process.
"""
import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import torch  # noqa: E402


def timed(fn, args_list, target_ms=4.0):
    fn(*args_list[0])
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn(*args_list[0])
    e.record()
    e.synchronize()
    one = max(s.elapsed_time(e), 1e-3)
    n = max(3, min(2000, int(target_ms / one)))
    best = float("inf")
    for _ in range(5):
        s.record()
        for i in range(n):
            fn(*args_list[i % len(args_list)])
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) / n)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--mb", type=float, default=256.0)
    ap.add_argument("--f64", action="store_true")
    ap.add_argument("--masked", action="store_true")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    widths = {1 << k for k in range(19)}
    for _ in range(a.count):
        c = int(round(math.exp(rng.uniform(0, math.log(1 << 18)))))
        if rng.random() < 0.5:
            c |= 1
        widths.add(max(1, c))
    dt = torch.float64 if a.f64 else torch.float32
    esz = 8 if a.f64 else 4
    import bufkern.torch as bt
    libs = [("bk", bt)]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    hdr = "cols rows copy_ms aten_ms " + " ".join(f"{n}_ms {n}_%copy {n}_xaten" for n, _ in libs)
    print(hdr)
    for cols in sorted(widths):
        rows = max(1, int(a.mb * 2**20 / (cols * esz)))
        nbytes = rows * cols * esz
        copies = max(1, min(4, math.ceil(3 * l2 / nbytes)))
        xs = [torch.randn(rows, cols, device="cuda", dtype=dt) * 4 for _ in range(copies)]
        ms = [(torch.rand(rows, cols, device="cuda") < 0.7).to(dt) for _ in range(copies)] if a.masked else None
        copy = timed(lambda x: x.clone(), [(x,) for x in xs])
        if a.masked:
            def aten(x, m):
                return torch.softmax(x.masked_fill(m == 0, float("-inf")), -1).nan_to_num_(0.0)
            args = [(xs[i], ms[i]) for i in range(copies)]
        else:
            def aten(x):
                return torch.softmax(x, -1)
            args = [(x,) for x in xs]
        at = timed(aten, args)
        ref = aten(*args[0])
        line = f"{cols} {rows} {copy:.4f} {at:.4f}"
        for name, bt in libs:
            fn = bt.masked_softmax if a.masked else bt.softmax
            got = fn(*args[0])
            err = (got - ref).abs().max().item()
            if not err <= (1e-5 if not a.f64 else 1e-12):
                line += f" {name}:MISMATCH({err:.3g})"
                continue
            t = timed(fn, args)
            line += f" {t:.4f} {100 * copy / t:.1f} {at / t:.2f}"
        print(line, flush=True)
        del xs, ms, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

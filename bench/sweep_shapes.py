"""The shape distribution of the sweep benchmarks, drawn from a seed.

`bufkern bench --sweep` (tools/bench_sweep.c) and `bench/vs_torch.py --sweep` draw their
shapes from this distribution with the same generator, so one seed gives the same shapes in
both: every draw is integer arithmetic on a splitmix64 stream, written identically in C and
here, and tests/test_sweep_shapes.py checks that the two agree line by line.

Each shape has its own stream, seeded from (seed, primitive name, size class, index), so a
shape does not depend on which other primitives, classes or counts a run selects. The size
class fixes the bytes the inputs hold: "large" draws uniformly from 256 MiB to 1 GiB,
"medium" from 4 MiB to 32 MiB; a byte cap (`--max-bytes`) scales both ranges down in
proportion, for smoke tests. Extents that are "log-uniform" draw an octave [2^b, 2^(b+1))
uniformly, then a value uniformly inside it.

    shapes(seed, count, dtype, families=None, max_bytes=None) -> list of Shape
    Shape.line() -> the canonical text that `bufkern bench --sweep --list-only` prints

Run as a script it prints the same lines as the C harness:

    python3 bench/sweep_shapes.py --seed 1 --count 3 [--f64] [--family row]
"""

from __future__ import annotations

import argparse
import sys

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MIB = 1 << 20
GIB = 1 << 30

# Byte ranges of the size classes, in class order.
CLASSES = (("large", 256 * MIB, GIB), ("medium", 4 * MIB, 32 * MIB))

# Kinds of an extent: as drawn, a power of two, odd, prime, 7-smooth.
ANY, POW2, ODD, PRIME, SMOOTH = range(5)

# The convolution draws cap the work of one call at this many flops, so dense float64
# geometries stay timeable.
CONV_FLOP_CAP = 1 << 37

# (primitive, family) in run order. The row primitives list how many (rows, cols) inputs
# they read; the scans how many (T, S) inputs.
ROW_INPUTS = {"softmax": 1, "masked_softmax": 2, "rows_sum": 1, "rows_max": 1,
              "first_max_mask": 1, "topk_mask": 1, "layernorm_fwd": 1, "layernorm_bwd": 2,
              "xent_weighted": 2, "xent_teacher_loss": 2, "xent_teacher_grad": 2}
SCAN_INPUTS = {"scan_diag": 1, "scan_diag_var": 3, "scan_diag_bwd": 3, "scan_diag_var_bwd": 5}
PRIMITIVES = ([(p, "row") for p in ROW_INPUTS]
              + [("softmax_mid", "axis"), ("sum_axis", "axis")]
              + [(p, "layout") for p in ("broadcast_to", "broadcast_adjoint", "swap_adjacent",
                                         "slice", "concat")]
              + [("gather", "index"), ("scatter_add", "index")]
              + [(p, "scan") for p in SCAN_INPUTS]
              + [(p, "fft") for p in ("rfft", "irfft", "irfft_unnormalized")]
              + [("conv", "conv")])
FAMILIES = tuple(dict.fromkeys(f for _, f in PRIMITIVES))


def mix64(z):
    """The splitmix64 finalizer."""
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & M64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & M64
    return z ^ (z >> 31)


def fnv1a(text):
    h = 0xCBF29CE484222325
    for c in text.encode():
        h = (h ^ c) * 0x100000001B3 & M64
    return h


class Rng:
    """splitmix64: the state advances by the golden gamma, each output is its mix."""

    def __init__(self, seed, prim, klass, index):
        self.s = mix64((seed ^ fnv1a(prim)) & M64) ^ ((klass << 32) | index)

    def next(self):
        self.s = (self.s + GOLDEN) & M64
        return mix64(self.s)

    def randint(self, lo, hi):
        """Uniform in [lo, hi] (modulo reduction; the bias is far below anything measured)."""
        return lo + self.next() % (hi - lo + 1)


def loguni(r, lo, hi):
    b = r.randint(lo.bit_length() - 1, hi.bit_length() - 1)
    return r.randint(max(lo, 1 << b), min(hi, (2 << b) - 1))


def is_prime(v):
    if v < 2:
        return False
    d = 2
    while d * d <= v:
        if v % d == 0:
            return False
        d += 1
    return True


def is_smooth(v):
    for p in (2, 3, 5, 7):
        while v % p == 0:
            v //= p
    return v == 1


def nearest(v, lo, hi, test):
    """The first value at or above v passing test, within hi; else the last below v, within
    lo; else v."""
    for w in range(v, hi + 1):
        if test(w):
            return w
    for w in range(v - 1, lo - 1, -1):
        if test(w):
            return w
    return v


def shaped(r, lo, hi, kind):
    """A log-uniform extent in [lo, hi] of the given kind (where the range holds one)."""
    v = loguni(r, lo, hi)
    if kind == POW2:
        p = 1 << (v.bit_length() - 1)
        return p if p >= lo else v
    if kind == ODD:
        if v % 2 == 0:
            v = v + 1 if v + 1 <= hi else (v - 1 if v - 1 >= lo else v)
        return v
    if kind == PRIME:
        return nearest(v, lo, hi, is_prime)
    if kind == SMOOTH:
        return nearest(v, lo, hi, is_smooth)
    return v


def width(r, lo, hi):
    """A row width: as drawn, a power of two, odd or prime, a quarter of the time each."""
    kind = (ANY, POW2, ODD, PRIME)[r.randint(0, 3)]
    return shaped(r, lo, hi, kind)


def iroot(v, k):
    """The largest m >= 1 with m^k <= v (v >= 1, k >= 1)."""
    def fits(m):
        p = 1
        for _ in range(k):
            if p > v // m:
                return False
            p *= m
        return True

    lo, hi = 1, min(v, 1 << 32)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def shuffle(r, items):
    """Fisher-Yates, from the last position down."""
    for i in range(len(items) - 1, 0, -1):
        j = r.randint(0, i)
        items[i], items[j] = items[j], items[i]


def split(r, total, rank):
    """rank extents whose product is close to total (at most total, each >= 1), in random
    order: each axis draws around the rank-th root of what is left, the last takes the rest."""
    dims, rem = [], max(1, total)
    for j in range(rank - 1):
        root = iroot(rem, rank - j)
        d = min(r.randint(max(1, root // 2), 2 * root), rem)
        dims.append(d)
        rem = max(1, rem // d)
    dims.append(rem)
    shuffle(r, dims)
    return dims


class Shape:
    """One drawn shape: the primitive, its family, dtype, size class, index and its fields
    (ints or lists of ints) in print order."""

    def __init__(self, prim, family, dtype, klass, index, fields):
        self.prim, self.family, self.dtype, self.klass, self.index = prim, family, dtype, klass, index
        self.fields = fields

    def __getitem__(self, key):
        return self.fields[key]

    def line(self):
        parts = [self.prim, self.dtype, CLASSES[self.klass][0], str(self.index)]
        for k, v in self.fields.items():
            parts.append(f"{k}=" + (",".join(str(x) for x in v) if isinstance(v, list) else str(v)))
        return " ".join(parts)


def _target(r, klass, max_bytes):
    _, lo, hi = CLASSES[klass]
    t = r.randint(lo, hi)
    if max_bytes and max_bytes < GIB:
        t = t * max_bytes // GIB
    return max(t, 1)


def draw(seed, prim, family, dtype, klass, index, max_bytes=None):
    r = Rng(seed, prim, klass, index)
    es = 8 if dtype == "f64" else 4
    m = max(1, _target(r, klass, max_bytes) // es)
    f = {}
    if family == "row":
        nin = ROW_INPUTS[prim]
        f["cols"] = width(r, 1, min(1 << 18, max(1, m // nin)))
        f["rows"] = max(1, m // (nin * f["cols"]))
        if prim == "topk_mask":
            f["k"] = loguni(r, 1, min(f["cols"], 64))
    elif family == "axis":
        inner = loguni(r, 1, min(1 << 16, m))
        n = loguni(r, 1, min(1 << 16, max(1, m // inner)))
        f["outer"], f["n"], f["inner"] = max(1, m // (n * inner)), n, inner
    elif prim in ("broadcast_to", "broadcast_adjoint"):
        rank = r.randint(1, 16)
        out = split(r, m, rank)
        role = [r.randint(0, 2) for _ in range(rank)]  # 0 kept, 1 from extent 1, 2 inserted
        kept = [j for j in range(rank) if role[j] != 2]
        perm = list(range(len(kept)))
        shuffle(r, perm)
        in_dims, amap = [0] * len(kept), [0] * rank
        for a, j in zip(perm, kept):
            amap[j] = a + 1
            in_dims[a] = out[j] if role[j] == 0 else 1
        f["out"], f["in"], f["map"] = out, in_dims, amap
    elif prim == "swap_adjacent":
        rank = r.randint(2, 16)
        f["dims"] = split(r, m, rank)
        f["depth"] = r.randint(0, rank - 2)
    elif prim == "slice":
        length = r.randint(max(1, m // 4), m)
        f["n"], f["start"], f["len"] = m, r.randint(0, m - length), length
    elif prim == "concat":
        n = loguni(r, 1, max(1, m - 1))
        f["n"], f["m"] = n, max(0, m - n)
    elif family == "index":
        cols = width(r, 1, min(1 << 16, m))
        big = max(1, m // cols)
        e = r.randint(-10, 10)
        rows, k = (max(1, big >> e), big) if e >= 0 else (big, max(1, big >> -e))
        f["rows"], f["cols"], f["k"] = rows, cols, k
    elif family == "scan":
        nin = SCAN_INPUTS[prim]
        t = loguni(r, 1, min(1 << 16, m))
        s = min(1 << 20, max(1, m // (nin * t)))
        if s == 1 << 20:
            t = max(1, m // (nin * s))
        f["T"], f["S"] = t, s
    elif family == "fft":
        n = shaped(r, 1, min(1 << 20, m), (POW2, SMOOTH, ODD, PRIME)[index % 4])
        row = n if prim == "rfft" else 2 * (n // 2 + 1)
        f["batch"], f["n"] = max(1, m // row), n
    elif family == "conv":
        f.update(_draw_conv(r, m))
    else:
        raise ValueError(f"unknown primitive {prim}")
    return Shape(prim, family, dtype, klass, index, f)


def _draw_conv(r, m):
    sr = r.randint(1, 3)
    kmax = (9, 5, 3)[sr - 1]
    ks, dil, stride, pb, pa = [], [], [], [], []
    for _ in range(sr):
        k = r.randint(1, kmax)
        d = 1 if r.randint(0, 1) == 0 else r.randint(2, 3)
        eff = (k - 1) * d + 1
        ks.append(k)
        dil.append(d)
        stride.append(r.randint(1, 2))
        pb.append(r.randint(0, eff - 1))
        pa.append(r.randint(0, eff - 1))
    kind = r.randint(0, 2)  # dense, grouped, depthwise
    cin0 = loguni(r, 1, 512)
    if kind == 0:
        groups, cin, cout = 1, cin0, loguni(r, 1, 512)
    elif kind == 1:
        groups = (2, 4, 8)[r.randint(0, 2)]
        cin = max(1, cin0 // groups) * groups
        cout = max(1, loguni(r, 1, 512) // groups) * groups
    else:
        groups = cin = cout = cin0
    prodk = 1
    for k in ks:
        prodk *= k
    work = max(1, 2 * cout * prodk // groups)  # flops per input element
    m = max(1, min(m, CONV_FLOP_CAP // work))
    nb = min(loguni(r, 1, 64), max(1, m // cin))
    sp = split(r, max(1, m // (nb * cin)), sr)
    sp = [max(s, (k - 1) * d + 1) for s, k, d in zip(sp, ks, dil)]
    return {"N": nb, "cin": cin, "cout": cout, "groups": groups, "in": sp, "k": ks,
            "stride": stride, "pad_before": pb, "pad_after": pa, "dil": dil}


def conv_out(s):
    """The output extents of a convolution shape."""
    return [(x + b + a - ((k - 1) * d + 1)) // st + 1
            for x, b, a, k, d, st in zip(s["in"], s["pad_before"], s["pad_after"], s["k"], s["dil"],
                                         s["stride"])]


def plot_x(s):
    """(name, value) of the extent a plot sets the fraction of copy against: the row width for
    the row and index families, the reduced length for the axis family, the innermost output
    extent for broadcasts and swaps, the length for vectors and FFTs, the state width for
    scans, C_in for convolutions (as the C harness reports it)."""
    p, f = s.prim, s.family
    if f in ("row", "index"):
        return "cols", s["cols"]
    if p in ("broadcast_to", "broadcast_adjoint"):
        return "inner", s["out"][-1]
    if p == "swap_adjacent":
        return "inner", s["dims"][-1]
    if p == "slice":
        return "len", s["len"]
    if p == "concat":
        return "n+m", s["n"] + s["m"]
    if f == "scan":
        return "S", s["S"]
    if f == "conv":
        return "cin", s["cin"]
    return "n", s["n"]


def selected(prim, family, families):
    return not families or prim in families or family in families


def counts(count):
    """Large and medium shapes per primitive for --count N: N large, half as many medium."""
    return count, (count + 1) // 2


def shapes(seed, count, dtype, families=None, max_bytes=None):
    out = []
    for prim, family in PRIMITIVES:
        if not selected(prim, family, families):
            continue
        for klass, n in enumerate(counts(count)):
            for i in range(n):
                out.append(draw(seed, prim, family, dtype, klass, i, max_bytes))
    return out


def parse_families(text):
    """--family F: comma-separated primitive or family names; None selects all."""
    if not text:
        return None
    names = [t for t in text.split(",") if t]
    known = set(FAMILIES) | {p for p, _ in PRIMITIVES}
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown family or primitive: {', '.join(bad)} (families: "
                         f"{', '.join(FAMILIES)})")
    return set(names)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a message) when matplotlib is not
    installed: the benchmarks' plots are optional."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        print(f"plots skipped: matplotlib is not importable ({exc})", file=sys.stderr)
        return None
    return plt


def main(argv=None):
    p = argparse.ArgumentParser(description="Print the sweep's shapes for a seed.")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--f64", action="store_true")
    p.add_argument("--family")
    p.add_argument("--max-bytes", type=int)
    a = p.parse_args(argv)
    for s in shapes(a.seed, a.count, "f64" if a.f64 else "f32", parse_families(a.family),
                    a.max_bytes):
        print(s.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())

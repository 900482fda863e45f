#!/usr/bin/env python3
"""The sweep's two generators draw the same shapes from a seed.

Runs `bufkern bench --sweep --list-only` (the C generator, tools/bench_sweep.c) and the Python
generator of bench/sweep_shapes.py (the one bench/vs_torch.py --sweep times ATen with) for
several seeds, both dtypes, every family, a family selection and a byte cap, and compares the
shape lines exactly. A seed of its own draws different shapes: two seeds must disagree.

    python3 tests/test_sweep_shapes.py path/to/bufkern
"""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import sweep_shapes  # noqa: E402


def c_lines(tool, args):
    out = subprocess.run([tool, "bench", "--sweep", "--list-only", *args], check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if not line.startswith("#")]


def py_lines(seed, count, f64=False, family=None, max_bytes=None):
    fams = sweep_shapes.parse_families(family)
    return [s.line() for s in sweep_shapes.shapes(seed, count, "f64" if f64 else "f32", fams,
                                                  max_bytes)]


def main():
    tool = sys.argv[1]
    runs = [
        (dict(seed=1, count=3), ["--seed", "1", "--count", "3"]),
        (dict(seed=1, count=3, f64=True), ["--seed", "1", "--count", "3", "--f64"]),
        (dict(seed=987654321, count=12), ["--seed", "987654321", "--count", "12"]),
        (dict(seed=4294967295, count=8, f64=True), ["--seed", "4294967295", "--count", "8", "--f64"]),
        (dict(seed=5, count=6, family="fft,conv,rows_max"),
         ["--seed", "5", "--count", "6", "--family", "fft,conv,rows_max"]),
        (dict(seed=3, count=4, max_bytes=262144), ["--seed", "3", "--count", "4", "--max-bytes", "262144"]),
    ]
    failures = 0
    for kw, args in runs:
        c, p = c_lines(tool, args), py_lines(**kw)
        expected = sum(1 for prim, fam in sweep_shapes.PRIMITIVES
                       if sweep_shapes.selected(prim, fam, sweep_shapes.parse_families(kw.get("family"))))
        expected *= sum(sweep_shapes.counts(kw["count"]))
        if len(p) != expected:
            print(f"FAIL {args}: the Python generator drew {len(p)} shapes, expected {expected}")
            failures += 1
        if c != p:
            bad = next((i for i, (x, y) in enumerate(zip(c, p)) if x != y), min(len(c), len(p)))
            print(f"FAIL {args}: {len(c)} C lines, {len(p)} Python lines; first difference at {bad}:\n"
                  f"  C:      {c[bad] if bad < len(c) else '(none)'}\n"
                  f"  Python: {p[bad] if bad < len(p) else '(none)'}")
            failures += 1
    # The same selection under another seed must give other shapes.
    if c_lines(tool, ["--seed", "1", "--count", "3"]) == c_lines(tool, ["--seed", "2", "--count", "3"]):
        print("FAIL: seeds 1 and 2 drew the same shapes")
        failures += 1
    # A shape does not depend on what else is selected: the row family alone gives the same
    # row shapes as the full list.
    full = [line for line in c_lines(tool, ["--seed", "9", "--count", "2"]) if line.startswith("softmax ")]
    alone = c_lines(tool, ["--seed", "9", "--count", "2", "--family", "softmax"])
    if full != alone or not alone:
        print("FAIL: the softmax shapes depend on the family selection")
        failures += 1
    print(f"{len(runs) + 2 - failures}/{len(runs) + 2} sweep generator checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

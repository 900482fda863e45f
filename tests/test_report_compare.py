#!/usr/bin/env python3
"""bench/report.py's before/after table from two sweeps of the same seed.

Writes two small files of `bufkern bench --sweep --json` lines (a header, the copy line and
shape lines, one shape that ran only after and one that failed before) and checks the table:
the shapes paired by (primitive, dtype, class, index), the fractions of copy, the ratio of the
times, and the list of shapes that got slower.

    python3 tests/test_report_compare.py
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import report  # noqa: E402


def shape(prim, klass, index, ms, frac, status=0):
    return {"primitive": prim, "family": "row", "dtype": "f32", "class": klass, "index": index,
            "shape": f"cols={index + 1} rows=7", "x": index + 1, "x_name": "cols", "bytes": 1,
            "status": status, "ms": ms, "gbs": 1.0, "frac_copy": frac}


def write(path, rows):
    with open(path, "w") as f:
        f.write(json.dumps({"seed": 3, "device": "cuda:0", "dtype": "f32"}) + "\n")
        f.write(json.dumps({"copy_gbs": 4000.0, "copy_bytes": 1 << 30}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        before, after = Path(d) / "before.jsonl", Path(d) / "after.jsonl"
        write(before, [shape("rows_sum", "large", 0, 2.0, 0.40), shape("rows_sum", "large", 1, 1.0, 0.80),
                       shape("rows_sum", "medium", 0, 0.5, 0.20),
                       shape("rows_max", "large", 0, 1.0, 0.5, status=3)])
        write(after, [shape("rows_sum", "large", 0, 1.0, 0.80), shape("rows_sum", "large", 1, 1.25, 0.64),
                      shape("rows_sum", "medium", 0, 0.5, 0.20), shape("rows_max", "large", 0, 0.5, 1.0)])
        table = report.compare_table([str(before)], [str(after)])
    lines = table.splitlines()
    row = next((line for line in lines if line.startswith("| rows_sum | f32 |")), "")
    want = "| rows_sum | f32 | 3 | 40 / 60 | 64 / 72 | 20 / 40 | 20 / 64 | 0.80 / 1.00 / 2.00 |"
    if row != want:
        failures.append(f"rows_sum row is\n  {row}\nexpected\n  {want}")
    if any(line.startswith("| rows_max |") for line in lines):
        failures.append("rows_max, which failed before, was paired")
    if "Shapes slower after than before by more than 3%: 1 of 3." not in lines:
        failures.append("the count of slower shapes is wrong:\n" + table)
    slow = [line for line in lines if line.startswith("- ")]
    if len(slow) != 1 or not slow[0].startswith("- rows_sum f32 large 1 (cols=2 rows=7): 1 -> 1.25 ms"):
        failures.append(f"the slower shapes are {slow}")
    for f in failures:
        print("FAIL " + f)
    print(f"{4 - len(failures)}/4 before/after report checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

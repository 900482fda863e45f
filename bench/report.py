#!/usr/bin/env python3
"""Writes the measured tables of docs/PERFORMANCE.md from a benchmark run.

Inputs: the JSON lines of `bufkern bench --json` (the C harness: every fixed case, f32 and
f64) and the JSON of `bench/vs_torch.py --json` (bufkern and ATen side by side in one process);
for the sweep, the JSON lines of `bufkern bench --sweep --json` and the JSON of
`bench/vs_torch.py --sweep --json` (each option may be given once per file, e.g. one file per
dtype or family). Prints markdown to standard output; the prose around it lives in
docs/PERFORMANCE.md.

    python3 bench/report.py --bench bench.jsonl --vs vs.json > tables.md
    python3 bench/report.py --sweep-bench sweep-f32.jsonl --sweep-bench sweep-f64.jsonl \
        --sweep-vs vs-sweep-f32.json --sweep-vs vs-sweep-f64.json --plots plots > sweep.md
    python3 bench/report.py --before old-f32.jsonl --after new-f32.jsonl > change.md

--before/--after compare two sweeps of the same seed, run one after the other on the same
machine (the code before and after a change): per primitive, the fractions of copy and the
ratio of the times, and every shape that got slower by more than 3%.

The sweep summary gives, per primitive and dtype, the minimum, median and geometric mean of the
fraction of the same-run copy bandwidth (from the C harness when given, else from the bufkern
side of vs_torch.py) and of the speedup over ATen's composition (ATen's time over bufkern's,
same process), the minimum fraction of copy where the plotted extent (row width for the row
family) is at least 4096, and how many shapes were slower than ATen; for a CPU run
(vs_torch.py --device cpu) also the speedup over numpy where it has a composition. --plots writes, per
primitive and dtype, the fraction of copy against that extent (matplotlib; skipped with a
message when it is not installed).
"""
import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import sweep_shapes


def bench_table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    copy = next((r["copy_gbs"] for r in rows if r.get("copy_gbs")), None)
    out = [f"Same-run device copy bandwidth: **{copy:.0f} GB/s** (1 GiB, bytes read + written).", "",
           "| case | ms | GB/s or TFLOP/s | % of copy |",
           "|---|---|---|---|"]
    for r in rows:
        name = r["case"]
        if name.startswith("sweep_") or name == "copy_1GiB":
            continue
        if r.get("status", 0) != 0:
            out.append(f"| {name} | failed ({r['status']}) | | |")
            continue
        if "us_per_call" in r:
            rate, pct = f"{r['us_per_call']:.2f} us/call", ""
        elif r.get("tflops"):
            rate, pct = f"{r['tflops']:.1f} TFLOP/s", ""
        else:
            rate, pct = f"{r['gbs']:.0f} GB/s", f"{r['pct_copy']:.0f}%"
        out.append(f"| {name} | {r['ms']:.3f} | {rate} | {pct} |")
    sweep = [r for r in rows if r["case"].startswith("sweep_") and r.get("status", 0) == 0]
    if sweep:
        out += ["", "Row-width sweep (about 256 MB per input, f32): % of copy bandwidth", "",
                "| primitive | " + " | ".join(sorted({r['case'].split('_')[-2].split('x')[1]
                                                      for r in sweep}, key=int)) + " |"]
        widths = sorted({r['case'].split('_')[-2].split('x')[1] for r in sweep}, key=int)
        out.append("|---|" + "---|" * len(widths))
        prims = []
        for r in sweep:
            p = "_".join(r["case"].split("_")[1:-2])
            if p not in prims:
                prims.append(p)
        for p in prims:
            cells = []
            for w in widths:
                hit = [r for r in sweep if "_".join(r["case"].split("_")[1:-2]) == p
                       and r["case"].split("_")[-2].split("x")[1] == w]
                cells.append(f"{hit[0]['pct_copy']:.0f}%" if hit else "")
            out.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def vs_table(path):
    d = json.load(open(path))
    m = d["meta"]
    out = [f"Run {m['date']}, {m['device_name']}, torch {m['torch']}, CUDA {m['cuda']}; "
           f"same-run copy bandwidth {m['copy_gbs']:.0f} GB/s.", "",
           "| case | bufkern ms | bufkern rate | % of copy | ATen ms | ATen % of copy | speedup |",
           "|---|---|---|---|---|---|---|"]
    for c in d["cases"]:
        if c["status"] != "ok":
            out.append(f"| {c['name']} | {c['status']} | | | | | |")
            continue
        bk, at = c["bk_ms"], c["aten_ms"]
        if c.get("flops"):
            rate, fr, afr = f"{c['flops'] / bk / 1e9:.1f} TFLOP/s", "-", "-"
        else:
            rate = f"{c['bk_gbs']:.0f} GB/s"
            fr, afr = f"{100 * c['bk_frac_copy']:.0f}%", f"{100 * c['aten_frac_copy']:.0f}%"
        out.append(f"| {c['name']} | {bk:.4f} | {rate} | {fr} | {at:.4f} | {afr} | {at / bk:.2f}x |")
    if d.get("latency"):
        out += ["", "| per-call overhead from Python | bufkern us/call | torch eager us/call |",
                "|---|---|---|"]
        for l in d["latency"]:
            if l.get("status") == "ok":
                out.append(f"| {l['name']} | {l['bk_us']:.1f} | {l['aten_us']:.1f} |")
    return "\n".join(out)


def _key(primitive, dtype, klass, index):
    return (primitive, dtype, klass, int(index))


def load_sweep(bench_paths, vs_paths):
    """Shapes keyed by (primitive, dtype, class, index): the C harness's fraction of copy and the
    same-process ATen comparison, merged; plus the copy bandwidths of the runs."""
    shapes, copies = {}, []
    for path in bench_paths:
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            if "copy_gbs" in r and "primitive" not in r:
                copies.append(("bench " + Path(path).name, r["copy_gbs"]))
            if "primitive" not in r:
                continue
            d = shapes.setdefault(_key(r["primitive"], r["dtype"], r["class"], r["index"]), {})
            d.update({"shape": r["shape"], "x": r["x"], "x_name": r["x_name"]})
            d["ok"] = d.get("ok", True) and r["status"] == 0
            if r["status"] == 0:
                d["frac_copy"] = r["frac_copy"]
    for path in vs_paths:
        data = json.load(open(path))
        copies.append(("vs_torch " + Path(path).name, data["meta"]["copy_gbs"]))
        for r in data["shapes"]:
            d = shapes.setdefault(_key(r["primitive"], r["dtype"], r["class"], r["index"]), {})
            d.setdefault("shape", r["shape"])
            d.setdefault("x", r["x"])
            d.setdefault("x_name", r["x_name"])
            d["ok"] = d.get("ok", True) and r["status"] == "ok"
            if r["status"] != "ok":
                continue
            d.setdefault("frac_copy", r.get("bk_frac_copy"))
            d["vs_frac_copy"] = r.get("bk_frac_copy")
            d["aten_frac_copy"] = r.get("aten_frac_copy")
            d["speedup"] = r.get("speedup")
            d["speedup_np"] = r.get("speedup_np")
    return shapes, copies


def _stats(v):
    v = [x for x in v if x is not None and x > 0]
    if not v:
        return None
    return min(v), statistics.median(v), math.exp(sum(math.log(x) for x in v) / len(v))


def _pct3(t):
    return " | ".join(f"{100 * x:.0f}%" for x in t) if t else " | ".join(["", "", ""]).strip()


def sweep_table(shapes, copies):
    out = ["Same-run copy bandwidth: " + "; ".join(f"{name} {gbs:.0f} GB/s" for name, gbs in copies) + ".",
           "", "| primitive | dtype | shapes (large + medium) | failed | % of copy: min | median | geomean "
           "| min where x >= 4096 | speedup over ATen: min | median | geomean | slower than ATen |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # CPU runs (vs_torch.py --device cpu) time numpy too: two more columns.
    with_np = any(d.get("speedup_np") for d in shapes.values())
    if with_np:
        out[-2] += " speedup over numpy: min | median |"
        out[-1] += "---|---|"
    groups = {}
    for (prim, dtype, klass, _), d in shapes.items():
        groups.setdefault((prim, dtype), []).append((klass, d))
    order = list(dict.fromkeys(p for p, _, _, _ in shapes))
    for prim in order:
        for dtype in ("f32", "f64"):
            rows = groups.get((prim, dtype))
            if not rows:
                continue
            large = sum(1 for k, _ in rows if k == "large")
            failed = sum(1 for _, d in rows if not d.get("ok", True))
            fc = _stats([d.get("frac_copy") for _, d in rows])
            wide = _stats([d.get("frac_copy") for _, d in rows if d.get("x", 0) >= 4096])
            sp = _stats([d.get("speedup") for _, d in rows])
            timed = [d["speedup"] for _, d in rows if d.get("speedup") is not None]
            slower = sum(1 for x in timed if x < 1)
            spc = " | ".join(f"{x:.2f}x" for x in sp) if sp else " | ".join(["", "", ""]).strip()
            out.append(f"| {prim} | {dtype} | {large} + {len(rows) - large} | {failed} | {_pct3(fc)} | "
                       f"{'' if not wide else f'{100 * wide[0]:.0f}%'} | {spc} | "
                       f"{f'{slower} of {len(timed)}' if timed else ''} |")
            if with_np:
                sn = _stats([d.get("speedup_np") for _, d in rows])
                out[-1] += f" {sn[0]:.2f}x | {sn[1]:.2f}x |" if sn else " | |"
    worst = sorted(((d["frac_copy"], k, d) for k, d in shapes.items() if d.get("frac_copy")),
                   key=lambda t: t[0])[:10]
    if worst:
        out += ["", "The ten shapes furthest from the copy bandwidth:", "",
                "| primitive | dtype | class | shape | % of copy | speedup over ATen |", "|---|---|---|---|---|---|"]
        for frac, (prim, dtype, klass, _), d in worst:
            sp = f"{d['speedup']:.2f}x" if d.get("speedup") else ""
            out.append(f"| {prim} | {dtype} | {klass} | `{d['shape']}` | {100 * frac:.0f}% | {sp} |")
    return "\n".join(out)


def sweep_plots(shapes, directory):
    plt = sweep_shapes.pyplot()
    if plt is None:
        return []
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    groups = {}
    for (prim, dtype, klass, _), r in shapes.items():
        groups.setdefault((prim, dtype), []).append((klass, r))
    written = []
    for (prim, dtype), rows in groups.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for klass, marker in (("large", "o"), ("medium", "^")):
            for key, label, color in (("frac_copy", "bufkern", "C0"), ("aten_frac_copy", "ATen", "C1")):
                pts = [(r["x"], 100 * r[key]) for k, r in rows if k == klass and r.get(key)]
                if pts:
                    ax.scatter(*zip(*pts), marker=marker, color=color, s=18, label=f"{label}, {klass}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(rows[0][1].get("x_name", "x"))
        ax.set_ylabel("% of copy bandwidth")
        ax.set_ylim(bottom=0)
        ax.axhline(90, color="gray", lw=0.8, ls=":")
        ax.axhline(80, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{prim} ({dtype}) at the sweep's shapes")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = d / f"sweep_{prim}_{dtype}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        written.append(str(p))
    return written


def combined_plot(shapes, path):
    """One figure: bufkern's fraction of copy (top) and its speedup over ATen / PyTorch (bottom)
    against each shape's plotted extent, every primitive and dtype, large shapes filled."""
    plt = sweep_shapes.pyplot()
    if plt is None:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    prims = list(dict.fromkeys(p for p, _, _, _ in shapes))
    cmap = plt.get_cmap("tab20")
    for n, prim in enumerate(prims):
        for dtype, marker in (("f32", "o"), ("f64", "s")):
            for klass, fill in (("large", True), ("medium", False)):
                rows = [d for (p, dt, k, _), d in shapes.items() if p == prim and dt == dtype and k == klass]
                color = cmap(n % 20)
                kw = {"marker": marker, "s": 22, "edgecolors": color,
                      "facecolors": color if fill else "none"}
                pts = [(d["x"], 100 * d["frac_copy"]) for d in rows if d.get("frac_copy") and d.get("x")]
                if pts:
                    ax1.scatter(*zip(*pts), label=prim if dtype == "f32" and klass == "large" else None, **kw)
                pts = [(d["x"], d["speedup"]) for d in rows if d.get("speedup") and d.get("x")]
                if pts:
                    ax2.scatter(*zip(*pts), **kw)
    ax1.set_xscale("log", base=2)
    ax1.set_ylabel("bufkern, % of copy bandwidth")
    ax1.axhline(80, color="gray", lw=0.8, ls="--")
    ax1.set_ylim(0, 200)  # a medium shape read from cache can pass the copy rate: off the top
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=6, ncol=4)
    ax2.set_yscale("log", base=2)
    ax2.axhline(1, color="gray", lw=0.8, ls="--")
    ax2.set_ylabel("speedup over ATen (time ratio)")
    ax2.set_xlabel("plotted extent (row width, axis length, FFT length, ...)")
    ax2.grid(True, alpha=0.3)
    ax1.set_title("circles f32, squares f64; filled: inputs of 64-256 MB, open: 1-8 MB")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_times(paths):
    """(primitive, dtype, class, index) -> (ms, fraction of copy, shape) from the JSON lines of
    `bufkern bench --sweep --json`, for the shapes that ran."""
    out = {}
    for path in paths:
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            if "primitive" in r and r["status"] == 0:
                out[_key(r["primitive"], r["dtype"], r["class"], r["index"])] = (
                    r["ms"], r["frac_copy"], r["shape"])
    return out


def compare_table(before_paths, after_paths, worse=0.97):
    """Two sweeps of the same seed (the code before and after a change, run one after the
    other): per primitive and dtype the fraction of copy (min / median) before and after, over
    the large shapes and over all, and the ratio of times before / after (min / median / max,
    above 1 = faster now); then every shape whose ratio is below `worse`."""
    before, after = load_times(before_paths), load_times(after_paths)
    keys = sorted(k for k in after if k in before)
    out = ["| primitive | dtype | shapes | before: % of copy min / median (large) | after (large) "
           "| before (all) | after (all) | time before / after: min / median / max |",
           "|---|---|---|---|---|---|---|---|"]
    groups = {}
    for k in keys:
        groups.setdefault(k[:2], []).append(k)
    mm = lambda v: f"{100 * min(v):.0f} / {100 * statistics.median(v):.0f}" if v else "-"
    for (prim, dt), ks in groups.items():
        large = [k for k in ks if k[2] == "large"]
        r = [before[k][0] / after[k][0] for k in ks]
        out.append(f"| {prim} | {dt} | {len(ks)} | {mm([before[k][1] for k in large])} "
                   f"| {mm([after[k][1] for k in large])} | {mm([before[k][1] for k in ks])} "
                   f"| {mm([after[k][1] for k in ks])} "
                   f"| {min(r):.2f} / {statistics.median(r):.2f} / {max(r):.2f} |")
    slower = [k for k in keys if before[k][0] / after[k][0] < worse]
    out.append("")
    out.append(f"Shapes slower after than before by more than {100 * (1 - worse):.0f}%: "
               f"{len(slower)} of {len(keys)}.")
    for k in slower:
        out.append(f"- {k[0]} {k[1]} {k[2]} {k[3]} ({after[k][2]}): {before[k][0]:.4g} -> "
                   f"{after[k][0]:.4g} ms, {100 * before[k][1]:.1f}% -> {100 * after[k][1]:.1f}% of copy")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", help="JSON lines from `bufkern bench --json`")
    ap.add_argument("--vs", help="JSON from bench/vs_torch.py --json")
    ap.add_argument("--sweep-bench", action="append", default=[],
                    help="JSON lines from `bufkern bench --sweep --json` (repeatable)")
    ap.add_argument("--sweep-vs", action="append", default=[],
                    help="JSON from bench/vs_torch.py --sweep --json (repeatable)")
    ap.add_argument("--plots", help="with the sweep: write PNG plots into this directory")
    ap.add_argument("--combined-plot", help="with the sweep: one PNG of every primitive (this file)")
    ap.add_argument("--before", action="append", default=[],
                    help="JSON lines of `bufkern bench --sweep --json` from the code before a change "
                         "(repeatable); with --after, a before/after table of the same seed")
    ap.add_argument("--after", action="append", default=[],
                    help="the same from the code after the change (repeatable)")
    a = ap.parse_args()
    if a.before and a.after:
        print("### Before and after, the same shapes (`bufkern bench --sweep`)\n")
        print(compare_table(a.before, a.after))
        print()
    if a.bench:
        print("### `bufkern bench` (C harness, CUDA events)\n")
        print(bench_table(a.bench))
        print()
    if a.vs:
        print("### Side by side with ATen (`bench/vs_torch.py`)\n")
        print(vs_table(a.vs))
        print()
    if a.sweep_bench or a.sweep_vs:
        shapes, copies = load_sweep(a.sweep_bench, a.sweep_vs)
        print("### At shapes drawn at random (`bufkern bench --sweep`, `bench/vs_torch.py --sweep`)\n")
        print(sweep_table(shapes, copies))
        if a.plots:
            for p in sweep_plots(shapes, a.plots):
                print(f"plot: {p}", file=sys.stderr)
        if a.combined_plot and combined_plot(shapes, a.combined_plot):
            print(f"plot: {a.combined_plot}", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the measured tables of docs/PERFORMANCE.md from a benchmark run.

Inputs: the JSON lines of `bufkern bench --json` (the C harness: every reference case, f32 and
f64) and the JSON of `bench/vs_torch.py --json` (bufkern and ATen side by side in one process).
Prints markdown to standard output; the prose around it lives in docs/PERFORMANCE.md.

    python3 bench/report.py --bench bench.jsonl --vs vs.json > tables.md
"""
import argparse
import json


def bench_table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    copy = next((r["copy_gbs"] for r in rows if r.get("copy_gbs")), None)
    out = [f"Same-run device copy bandwidth: **{copy:.0f} GB/s** (1 GiB, bytes read + written).", "",
           "| case | ms | GB/s or TFLOP/s | % of copy | ATen ms (reference) | speedup |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        name = r["case"]
        if name.startswith("sweep_") or name == "copy_1GiB":
            continue
        if r.get("status", 0) != 0:
            out.append(f"| {name} | failed ({r['status']}) | | | | |")
            continue
        if "us_per_call" in r:
            rate, pct = f"{r['us_per_call']:.2f} us/call", ""
        elif r.get("tflops"):
            rate, pct = f"{r['tflops']:.1f} TFLOP/s", ""
        else:
            rate, pct = f"{r['gbs']:.0f} GB/s", f"{r['pct_copy']:.0f}%"
        aten = f"{r['aten_ms']:.3f}" if r.get("aten_ms") else "-"
        speed = f"{r['speedup']:.2f}x" if r.get("speedup") else ""
        out.append(f"| {name} | {r['ms']:.3f} | {rate} | {pct} | {aten} | {speed} |")
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", help="JSON lines from `bufkern bench --json`")
    ap.add_argument("--vs", help="JSON from bench/vs_torch.py --json")
    a = ap.parse_args()
    if a.bench:
        print("### `bufkern bench` (C harness, CUDA events)\n")
        print(bench_table(a.bench))
        print()
    if a.vs:
        print("### Side by side with ATen (`bench/vs_torch.py`)\n")
        print(vs_table(a.vs))


if __name__ == "__main__":
    main()

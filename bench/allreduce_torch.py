#!/usr/bin/env python3
"""All-reduce bandwidth through PyTorch's NCCL backend, for comparison with
`bufkern demo --gpus N` (its last line: an all-reduce, sum, of 1 GiB float32
on every GPU, the mean of 5 timed calls after one warm-up).

One process per GPU (torch.multiprocessing), a process group over NCCL with a
file rendezvous; each rank all-reduces a 1 GiB float32 tensor out of place
(a clone then all_reduce, as bufkern returns a new buffer) and in place.
Rank 0 prints lines of the demo's format:

    torch all_reduce (sum) of 1 GiB float32 over N GPUs, out of place: T ms,
    algbw A GB/s, busbw B GB/s

algbw is bytes / time; busbw, NCCL's measure of the links' load, is
2 (N - 1) / N times that (0 for one GPU). Runs with N = 1 too.

Usage: python bench/allreduce_torch.py [--gpus N] [--gib X] [--reps R]
"""
import argparse
import os
import tempfile
import time


def worker(rank, world, init_file, nbytes, reps, queue):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    x = torch.zeros(nbytes // 4, dtype=torch.float32, device="cuda")
    results = {}
    for label, out_of_place in (("out of place", True), ("in place", False)):
        for rep in range(-1, reps):
            if rep == 0:
                torch.cuda.synchronize()
                dist.barrier()
                t0 = time.perf_counter()
            y = x.clone() if out_of_place else x
            dist.all_reduce(y, op=dist.ReduceOp.SUM)
            del y
            torch.cuda.synchronize()
        results[label] = (time.perf_counter() - t0) / reps
    # A value check: every rank adds rank + 1, so the sum is world (world + 1) / 2.
    z = torch.full((1024,), float(rank + 1), device="cuda")
    dist.all_reduce(z)
    ok = bool(torch.all(z == world * (world + 1) / 2).item())
    if rank == 0:
        queue.put((results, ok))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=0, help="GPUs (default: every visible one)")
    ap.add_argument("--gib", type=float, default=1.0, help="message size in GiB (default 1)")
    ap.add_argument("--reps", type=int, default=5, help="timed calls (default 5)")
    args = ap.parse_args()

    import torch
    import torch.multiprocessing as mp

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 77
    world = args.gpus or torch.cuda.device_count()
    nbytes = int(args.gib * (1 << 30)) // 4 * 4
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.spawn(worker, args=(world, init_file, nbytes, args.reps, queue), nprocs=world,
                 join=True)
    results, ok = queue.get()
    gb = nbytes / 1e9
    for label, seconds in results.items():
        algbw = gb / seconds
        busbw = algbw * 2.0 * (world - 1) / world
        print(f"torch all_reduce (sum) of {args.gib:g} GiB float32 over {world} GPU"
              f"{'' if world == 1 else 's'}, {label}: {seconds * 1e3:.3f} ms, "
              f"algbw {algbw:.1f} GB/s, busbw {busbw:.1f} GB/s")
    print(f"torch all_reduce value check: {'ok' if ok else 'WRONG SUM'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

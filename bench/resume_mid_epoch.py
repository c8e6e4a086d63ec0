#!/usr/bin/env python3
"""What resuming an epoch mid-way costs a Python script: the time from the loader's start to the
first batch it trains, when it resumes at batch K of an epoch of JPEGs.

  iterate   the common way: `for i, batch in enumerate(loader): if i < K: continue` (every skipped
            image is still read, decoded, cropped and normalised by the loader's workers)
  sampler   dtrun.ResumableSampler(sampler).start_at(K, batch): the skipped indices are dropped
            before the loader sees them

torchvision's ImageFolder with ImageNet's training transforms (RandomResizedCrop(224), a flip,
ToTensor, Normalize) on a dataset `dtdata make-demo` writes, one rank of a DistributedSampler.
Medians of --trials runs, the modes alternated.

Usage: bench/resume_mid_epoch.py BUILD_DIR [--images-per-class 200] [--batch 32] [--workers 2]
                                 [--at 0.5] [--trials 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def first_batch_seconds(dataset, mode, skip_batches, args):
    import dtrun
    from torch.utils.data import DataLoader, DistributedSampler

    sampler = dtrun.ResumableSampler(DistributedSampler(dataset, num_replicas=1, rank=0, seed=0))
    sampler.set_epoch(1)
    if mode == "sampler":
        sampler.start_at(skip_batches, args.batch)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=args.workers)
    start = time.perf_counter()
    first = skip_batches if mode == "sampler" else 0
    for i, (x, _) in enumerate(loader, first):
        if i >= skip_batches:
            assert x.shape[0] > 0
            return time.perf_counter() - start
    raise SystemExit(f"the epoch has no batch {skip_batches}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build")
    parser.add_argument("--images-per-class", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--at", type=float, default=0.5, help="where in the epoch it resumes (0..1)")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "lib", "dtrun", "python"))
    import torchvision.datasets as datasets
    import torchvision.transforms as T

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([os.path.join(args.build, "bin", "dtdata"), "make-demo", tmp, "--train-per-class",
                        str(args.images_per_class), "--val-per-class", "0", "--width", "320", "--height", "320"],
                       check=True, stdout=subprocess.DEVNULL)
        normalize = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
        dataset = datasets.ImageFolder(os.path.join(tmp, "train"), T.Compose(
            [T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), normalize]))
        batches = len(dataset) // args.batch
        skip = int(batches * args.at)
        times = {"iterate": [], "sampler": []}
        for _ in range(args.trials):
            for mode in times:
                times[mode].append(first_batch_seconds(dataset, mode, skip, args))
    it, sa = statistics.median(times["iterate"]), statistics.median(times["sampler"])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {len(dataset)} JPEGs of 320x320, batch {args.batch}, "
          f"{args.workers} loader workers, resumed at batch {skip} of {batches}; medians of {args.trials}")
    print(f"| first trained batch after the restart | iterate and skip | {it:.2f} s |")
    print(f"| first trained batch after the restart | dtrun.ResumableSampler | {sa:.2f} s |")
    print(f"ratio: {it / sa:.0f}x")


if __name__ == "__main__":
    main()

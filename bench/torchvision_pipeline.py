#!/usr/bin/env python3
"""torchvision's ImageNet training input pipeline, images/s: ImageFolder + RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize through a DataLoader with N worker processes
(N = 0: in the main process). Run with Debian's /usr/bin/python3 (torch 1.13, torchvision 0.14).
  bench/torchvision_pipeline.py ROOT --workers N [--batches 20 --batch-size 32]
"""
import argparse
import time

import torch
from torchvision import datasets, transforms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    ds = datasets.ImageFolder(args.root, tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                         persistent_workers=args.workers > 0)
    it = iter(loader)
    next(it)  # start-up (worker processes, first batch) is not counted
    images, start = 0, time.perf_counter()
    while images < args.batches * args.batch_size:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        images += x.shape[0]
    s = time.perf_counter() - start
    cores = max(1, args.workers)
    print(f"torchvision workers={args.workers} images={images} images_per_s={images / s:.1f} per_core={images / s / cores:.1f}")


if __name__ == "__main__":
    main()

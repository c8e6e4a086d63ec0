#!/usr/bin/env python3
"""The Python peer for the recovery benchmarks: the job train_imagenet runs in bench/recovery.py and
bench/effective_time.py (torchvision ResNet-18, 64 px synthetic images, batch 32 per process, SGD
0.1/0.9/1e-4, gloo DDP), recovering the way a torchrun user does today: rank 0 writes a checkpoint
(model, optimizer, step) every --checkpoint-every steps with torch.save and an atomic rename, and
every rank loads it when it starts.

Rank 0 prints "start at step N" once its state is loaded (0 without a checkpoint), then "step N"
after every step (N counts over the whole run, resumed runs included) and "saved step N in S s"
after each checkpoint; bench scripts read those.

With --dtrun-snapshot it recovers the way docs/MIGRATING.md shows instead: dtrun.restore() at
start, dtrun.snapshot() after every step (dtrun's adaptive cadence, and snapshots on failure unless
DTRUN_SNAPSHOT_ON_FAILURE=off). Rank 0 then prints "snapshot step N in S s" for each snapshot
written and, every 20 steps, "armed A times, M ms each" (the arming's own count and time).

Usage (under torchrun or dtrun): recovery_reference.py --checkpoint-dir DIR [--checkpoint-every 50]
  [--steps 1000000] [--synthetic-size 8192] [--dtrun-snapshot]
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--checkpoint-dir", default="")
ap.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (0: none)")
ap.add_argument("--steps", type=int, default=1000000)
ap.add_argument("--image-size", type=int, default=64)
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--synthetic-size", type=int, default=8192, help="distinct synthetic images (a fixed pool)")
ap.add_argument("--dtrun-snapshot", action="store_true", help="dtrun.restore/dtrun.snapshot instead of the checkpoint")
args = ap.parse_args()
if args.dtrun_snapshot:
    import dtrun

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(torchvision.models.resnet18(num_classes=1000))
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
criterion = nn.CrossEntropyLoss()

path = os.path.join(args.checkpoint_dir, "checkpoint.pt") if args.checkpoint_dir else ""
step = 0
if path and os.path.exists(path):
    saved = torch.load(path, map_location="cpu")
    model.module.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    step = saved["step"]
if args.dtrun_snapshot:
    restored = dtrun.restore()
    if restored:
        model.module.load_state_dict(restored.state["model"])
        optimizer.load_state_dict(restored.state["optimizer"])
        step = restored.step
if rank == 0:
    print(f"start at step {step}", flush=True)

# A fixed pool of synthetic batches, as train_imagenet --synthetic has: the data costs nothing.
gen = torch.Generator().manual_seed(rank)
pool = max(1, args.synthetic_size // (args.batch_size * world))
images = torch.randn(min(pool, 16), args.batch_size, 3, args.image_size, args.image_size, generator=gen)
labels = torch.randint(0, 1000, (min(pool, 16), args.batch_size), generator=gen)

model.train()
while step < args.steps:
    i = step % images.shape[0]
    loss = criterion(model(images[i]), labels[i])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    if rank == 0:
        print(f"step {step} loss {loss.item():.4f} t {time.time():.3f}", flush=True)
    if args.dtrun_snapshot:
        began = time.time()
        wrote = dtrun.snapshot({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, step)
        if rank == 0 and wrote:
            print(f"snapshot step {step} in {time.time() - began:.4f} s", flush=True)
        keeper = dtrun._keeper  # the arming's own bookkeeping (python/dtrun/_on_failure.py), for the bench
        if rank == 0 and step % 20 == 0 and keeper is not None and keeper.arms:
            print(f"armed {keeper.arms} times, {1e3 * keeper.arm_seconds / keeper.arms:.3f} ms each", flush=True)
    if path and args.checkpoint_every and step % args.checkpoint_every == 0 and rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        began = time.time()
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                   path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"saved step {step} in {time.time() - began:.3f} s", flush=True)
dist.destroy_process_group()
sys.exit(0)

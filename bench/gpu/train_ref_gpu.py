#!/usr/bin/env python3
"""The Python peer of train_imagenet on a GPU: pytorch/examples imagenet/main.py's training step
(torchvision ResNet, SGD 0.9 / 1e-4, cross-entropy, loss.item() and top-1 every step) with CUDA
autocast (fp16 with torch.amp.GradScaler, or bf16) and channels-last, as NVIDIA's and PyTorch's
AMP recipes do. Input: ImageFolder JPEGs through a DataLoader (RandomResizedCrop + flip,
pin_memory), or --synthetic uint8 batches copied from pinned memory like train_imagenet's.
Prints "BENCH {json}" with images/s over the timed window (after --warmup-iters).
  train_ref_gpu.py [DIR] [--synthetic] -a resnet50 -b 256 --amp fp16|bf16|off -j 16 [--compile]
  --profile-steps N --profile-out F: a Chrome trace of N timed steps (bench/gpu/trace_summary.py)
"""
import time

STARTED = time.perf_counter()  # before importing torch: the time to the first step counts from here

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision.datasets as datasets
import torchvision.models as models
import torchvision.transforms as transforms



def tree_cpu_seconds():
    """User + system CPU seconds of this process and its live descendants (the DataLoader's
    workers): the cores the run keeps busy, read from /proc."""
    stats = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(pid)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid, utime + stime
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(stats[pid][1] for pid in tree if pid in stats) / os.sysconf("SC_CLK_TCK")


p = argparse.ArgumentParser()
p.add_argument("data", nargs="?", default="")
p.add_argument("--synthetic", action="store_true")
p.add_argument("-a", "--arch", default="resnet50")
p.add_argument("-b", "--batch-size", type=int, default=256)
p.add_argument("-j", "--workers", type=int, default=16)
p.add_argument("--amp", choices=["off", "fp16", "bf16"], default="fp16")
p.add_argument("--image-size", type=int, default=224)
p.add_argument("--compile", action="store_true", help="torch.compile the model")
p.add_argument("--warmup-iters", type=int, default=20)
p.add_argument("--timed-iters", type=int, default=50)
p.add_argument("--bench-json", default="")
p.add_argument("--profile-steps", type=int, default=0,
               help="trace this many steps from the first timed one with torch.profiler")
p.add_argument("--profile-out", default="trace.json", help="the Chrome trace --profile-steps writes")
args = p.parse_args()

torch.backends.cudnn.benchmark = True
distributed = "WORLD_SIZE" in os.environ
local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
if distributed:
    dist.init_process_group("nccl", device_id=device)
world = dist.get_world_size() if distributed else 1

model = models.__dict__[args.arch]().to(device, memory_format=torch.channels_last)
if distributed:
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
if args.compile:
    model = torch.compile(model)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")
dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": torch.float32}[args.amp]
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255


def synthetic_batches():
    s, b = args.image_size, args.batch_size
    pool = [(torch.randint(0, 256, (b, s, s, 3), dtype=torch.uint8).pin_memory(),
             torch.randint(0, 1000, (b,)).pin_memory()) for _ in range(4)]
    i = 0
    while True:
        x, y = pool[i % len(pool)]
        i += 1
        x = x.to(device, non_blocking=True).permute(0, 3, 1, 2).float().sub_(mean).div_(std)
        yield x.contiguous(memory_format=torch.channels_last), y.to(device, non_blocking=True)


def folder_batches():
    normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    ds = datasets.ImageFolder(os.path.join(args.data, "train"), transforms.Compose([
        transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
        normalize]))
    sampler = torch.utils.data.distributed.DistributedSampler(ds) if distributed else None
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                                         num_workers=args.workers, pin_memory=True, drop_last=True,
                                         persistent_workers=True)
    epoch = 0
    while True:
        if sampler:
            sampler.set_epoch(epoch)
        for x, y in loader:
            yield (x.to(device, non_blocking=True).contiguous(memory_format=torch.channels_last),
                   y.to(device, non_blocking=True))
        epoch += 1


batches = synthetic_batches() if args.synthetic else folder_batches()
model.train()
data_s = 0.0
t0 = None
profiler = None
for it in range(args.warmup_iters + args.timed_iters):
    if args.profile_steps > 0 and it == args.warmup_iters:
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
        profiler.__enter__()
    if profiler is not None and it == args.warmup_iters + args.profile_steps:
        torch.cuda.synchronize()
        profiler.__exit__(None, None, None)
        profiler.export_chrome_trace(args.profile_out)
        print(f"=> profile of {args.profile_steps} steps written to {args.profile_out}", flush=True)
        profiler = None
    if it == 1:
        torch.cuda.synchronize()
        first_step_s = time.perf_counter() - STARTED
    if it == args.warmup_iters:
        torch.cuda.synchronize()
        if distributed:
            dist.barrier()
        t0 = time.perf_counter()
        cpu0 = tree_cpu_seconds()
        data_s = 0.0
    td = time.perf_counter()
    images, target = next(batches)
    data_s += time.perf_counter() - td
    with torch.autocast("cuda", dtype=dtype, enabled=args.amp != "off"):
        output = model(images)
        loss = criterion(output, target)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    loss_value = loss.item()  # as pytorch/examples: the step's loss and top-1 are read every step
    top1 = (output.argmax(1) == target).float().mean().item()
torch.cuda.synchronize()
elapsed = time.perf_counter() - t0
cpu_cores = (tree_cpu_seconds() - cpu0) / elapsed
if profiler is not None:
    profiler.__exit__(None, None, None)
    profiler.export_chrome_trace(args.profile_out)
    print(f"=> profile written to {args.profile_out}", flush=True)
res = {"images_per_s": args.timed_iters * args.batch_size * world / elapsed, "world_size": world,
       "batch": args.batch_size, "amp": args.amp, "compile": args.compile, "synthetic": args.synthetic,
       "workers": args.workers, "data_wait_s_per_step": data_s / args.timed_iters, "seconds": elapsed,
       "loss": loss_value, "first_step_s": first_step_s, "cpu_cores_busy": cpu_cores}
if not distributed or dist.get_rank() == 0:
    print("BENCH " + json.dumps(res), flush=True)
    if args.bench_json:
        with open(args.bench_json, "w") as f:
            json.dump(res, f)
if distributed:
    dist.destroy_process_group()

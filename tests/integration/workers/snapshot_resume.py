"""A DDP script that keeps its state with dtrun.snapshot() and resumes with dtrun.restore().

    snapshot_resume.py STEPS [--crash-at N [--forget]] [--freeze-at N] [--hidden H] [--hold]
                       [--first-attempt-runs-on | --fresh-runs-on] [--say-every N]
                       [--check-replicas [--corrupt-at N]] [--no-libuv] [--no-heartbeat]
                       [--slow-keep S] [--find-unused]

Deterministic on CPU with gloo: the batch of step s on rank r depends only on (s, r), so a run
that resumed ends with the same parameters as one that never stopped (two ranks; more need
--find-unused, below). With --crash-at N, rank 1
of the first attempt SIGKILLs itself right after step N's dtrun.snapshot() call; with --forget it
first empties its own snapshot slots, as if its memory were lost with it. Prints
RESTORED step=S (or FRESH) at start (then RESCALED batch=B, Restored.resume_batch's, when the
world size changed) and DIGEST rank=R <sha256 of the parameters> at the end;
with --hold it then prints HOLDING and waits for a signal (for `dtrun status` to look at it).
With --first-attempt-runs-on the first attempt trains past STEPS, a few ms a step, until the test
takes a node away; a later attempt ends at STEPS. With --fresh-runs-on, a run that starts
fresh trains on until it is stopped and one that restored trains STEPS steps more (for a job
stopped and submitted again: its restart count starts over). --say-every N prints STEP s every
Nth step. With --check-replicas every step calls
dtrun.check_replicas before its snapshot; --corrupt-at N makes rank 1 of the first attempt nudge
one parameter after step N's optimizer step, as silent data corruption would. With --freeze-at N,
rank 1 of the first attempt stops after step N's dtrun.snapshot() call, in Python (signal.pause),
and rank 0 blocks in the next step's all-reduce, in C++. --no-libuv: for torch 2.x builds without
libuv (Debian trixie's). --no-heartbeat: the script reports nothing but its snapshots, as most
scripts that add dtrun.snapshot() to a torchrun script do. --slow-keep S: in the first attempt,
keeping the state on the way out takes S seconds longer, as a large state's does on a busy machine.
--find-unused: DDP(find_unused_parameters=True), which keeps the first step's bucket layout (DDP
otherwise re-buckets after a process's first step, so a resumed process adds its first step's
gradients in another order: with three ranks or more, other bits; docs/MIGRATING.md).
"""

import argparse
import datetime
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import dtrun


def batch(step, rank, world):
    g = torch.Generator().manual_seed(step * world + rank)
    x = torch.randn(16, 32, generator=g)
    return x, (x.sum(dim=1, keepdim=True) > 0).float()


def digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def slow_down_keeping(seconds):
    """Only the write on the way out passes `before_commit` (dtrun._on_failure); periodic ones do not."""
    from dtrun import _snapshots
    write = _snapshots.Region.write

    def slow_write(self, state, step, before_commit=None):
        if before_commit is not None:
            time.sleep(seconds)  # stands for the copy of a large state, not a wait for anything
        return write(self, state, step, before_commit)
    _snapshots.Region.write = slow_write


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--forget", action="store_true")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--first-attempt-runs-on", action="store_true")
    parser.add_argument("--fresh-runs-on", action="store_true")
    parser.add_argument("--say-every", type=int, default=0)
    parser.add_argument("--check-replicas", action="store_true")
    parser.add_argument("--corrupt-at", type=int, default=-1)
    parser.add_argument("--freeze-at", type=int, default=-1)
    parser.add_argument("--no-libuv", action="store_true")
    parser.add_argument("--no-heartbeat", action="store_true")
    parser.add_argument("--slow-keep", type=float, default=0)
    parser.add_argument("--find-unused", action="store_true")
    args = parser.parse_args()
    if args.slow_keep and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        slow_down_keeping(args.slow_keep)
    if args.no_libuv:
        # Debian trixie's torch 2.6 has no libuv, and its agent-store path asks for it all the same
        # (as tests/integration/workers/store_ops_2x.py).
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=60), use_libuv=False)
        prefix = "/worker/attempt_" + os.environ["TORCHELASTIC_RESTART_COUNT"]
        dist.init_process_group("gloo", store=dist.PrefixStore(prefix, store), rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1)),
                find_unused_parameters=args.find_unused)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    restored = dtrun.restore()
    if restored:
        model.module.load_state_dict(restored.state["model"])
        optimizer.load_state_dict(restored.state["optimizer"])
        start = restored.step
        print("RESTORED step=%d" % start, flush=True)
        if restored.world_size != world:  # were the steps one epoch's batches of 16, where it goes on
            print("RESCALED batch=%d" % restored.resume_batch(start, 16), flush=True)
    else:
        print("FRESH", flush=True)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    runs_on = (args.first_attempt_runs_on and attempt == 0) or (args.fresh_runs_on and not restored)
    end = start + args.steps if args.fresh_runs_on else args.steps
    step = start
    while step < end or runs_on:
        if runs_on:
            time.sleep(0.005)  # a step's pace, not a wait for anything
        x, y = batch(step, rank, world)
        optimizer.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(model(x), y).backward()
        optimizer.step()
        if attempt == 0 and rank == 1 and step + 1 == args.corrupt_at:
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-3
        if args.check_replicas:
            dtrun.check_replicas(model, optimizer, step + 1)
        if not args.no_heartbeat:
            dtrun.heartbeat(step + 1)
        dtrun.snapshot({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, step + 1)
        if args.say_every and (step + 1) % args.say_every == 0:
            print("STEP %d" % (step + 1), flush=True)
        if attempt == 0 and rank == 1 and step + 1 == args.crash_at:
            if args.forget:
                for slot in range(2):
                    dtrun._region.invalidate(slot)
            os.kill(os.getpid(), signal.SIGKILL)
        if attempt == 0 and rank == 1 and step + 1 == args.freeze_at:
            print("FROZEN", flush=True)
            while True:  # no more reports: dtrun declares the rank hung and stops every rank
                signal.pause()
        step += 1
    print("DIGEST rank=%d %s" % (rank, digest(model.module)), flush=True)
    if args.hold:
        print("HOLDING", flush=True)
        signal.pause()
    dist.destroy_process_group()
    # PyTorch 1.13 sometimes hangs at interpreter exit when DDP's reducer, which still holds the
    # Gloo group, is destroyed after the peers are gone (seen with 3 ranks after a restart: a
    # Gloo thread waits on a peer forever). Nothing is left to do here: leave without teardown.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

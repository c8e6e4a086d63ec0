"""A DDP script that resumes mid-epoch with dtrun.ResumableSampler, as a user would write it.

    sampler_resume.py EPOCHS [--crash-at STEP]

96 samples (the ints 0..95) in batches of 4 through torch's DistributedSampler and DataLoader,
one dtrun.snapshot() a step with the epoch and the batch. After each step a rank prints
TRAINED epoch=E idx=I,J,... (the samples of its batch). With --crash-at, rank 1 of the first
attempt SIGKILLs itself right after that step's snapshot. A run that restored prints RESTORED
step=S epoch=E batch=B, and every rank prints LOADED N TRAINED M at the end: the samples its
dataset loaded and trained in this attempt (equal: a skipped batch is never loaded).
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import dtrun

BATCH = 4


class Ints(Dataset):
    def __init__(self, n):
        self.n = n
        self.loaded = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.loaded += 1
        return torch.tensor([float(i)]), i


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("epochs", type=int)
    parser.add_argument("--crash-at", type=int, default=-1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    dataset = Ints(96)
    sampler = dtrun.ResumableSampler(DistributedSampler(dataset, shuffle=True, seed=7))
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)

    step, start_epoch, start_batch = 0, 0, 0
    restored = dtrun.restore()
    if restored:
        model.module.load_state_dict(restored.state["model"])
        optimizer.load_state_dict(restored.state["optimizer"])
        step, start_epoch = restored.step, restored.state["epoch"]
        start_batch = restored.resume_batch(restored.state["batch"], BATCH, restored.state["batch_size"])
        sampler.start_at(start_batch, BATCH)
        print("RESTORED step=%d epoch=%d batch=%d" % (step, start_epoch, start_batch), flush=True)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    trained = 0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        for batch, (x, idx) in enumerate(loader, start_batch if epoch == start_epoch else 0):
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            step += 1
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
                     "batch": batch + 1, "batch_size": BATCH}
            dtrun.snapshot(state, step)
            trained += len(idx)
            print("TRAINED epoch=%d idx=%s" % (epoch, ",".join(str(i) for i in idx.tolist())), flush=True)
            if step == args.crash_at and rank == 1 and attempt == 0:
                os.kill(os.getpid(), signal.SIGKILL)
    print("LOADED %d TRAINED %d" % (dataset.loaded, trained), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""A script with its state on the GPU whose rank is stopped by SIGTERM while its GPU is stuck: the
state of its last dtrun.snapshot() call is kept on the way out (dtrun/_on_failure.py), and the
restart resumes from it, on the GPU.

    dtrun --standalone --nproc-per-node 1 --max-restarts 1 --snapshot-every 1000 gpu_rescue.py

The first attempt trains 5 steps (a dtrun.snapshot() call after each) and prints
ARMED step=5 digest=D, then stalls the current stream for about 3 s (a spinning kernel: a stream
stuck behind a collective with a rank that is gone looks so, but this one ends), queues the next
forward behind the stall (it moves the batch-norm statistics), sends itself SIGTERM and waits for
the GPU. The rescue may wait for the GPU at most 1 s: it must copy after step 5's mark, not after
the stall. The restart prints RESTORED step=S digest=D device=DEV (the device of the restored
tensors, with no map_location given) and ends.
"""

import hashlib
import os
import signal

import torch
import torch.distributed as dist

import dtrun
from dtrun import _on_failure


def digest(state):
    h = hashlib.sha256()
    for part in (state["model"], state["optimizer"]["state"]):
        for v in part.values():
            for t in (v.values() if isinstance(v, dict) else [v]):
                if isinstance(t, torch.Tensor):
                    h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def stall(seconds):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe = 100_000_000
    start.record()
    torch.cuda._sleep(probe)
    stop.record()
    stop.synchronize()
    torch.cuda._sleep(int(seconds * probe / (start.elapsed_time(stop) / 1e3)))


def main():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.BatchNorm1d(1024),
                                torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def state():
        return {"model": model.state_dict(), "optimizer": opt.state_dict()}

    def forward():
        return model(torch.randn(64, 256, device="cuda")).square().mean()

    restored = dtrun.restore()
    if restored is not None:
        t = restored.state["model"]["0.weight"]
        print("RESTORED step=%d digest=%s device=%s" % (restored.step, digest(restored.state), t.device), flush=True)
        dist.destroy_process_group()
        return
    for step in range(1, 6):
        opt.zero_grad()
        forward().backward()
        opt.step()
        dtrun.snapshot(state(), step)
    print("ARMED step=5 digest=%s" % digest(state()), flush=True)
    _on_failure.RESCUE_WAIT_S = 1.0
    stall(3)
    forward()  # queued behind the stall
    os.kill(os.getpid(), signal.SIGTERM)  # the rescue runs on dtrun's thread, this one waits
    torch.cuda.synchronize()
    print("NOT STOPPED", flush=True)


if __name__ == "__main__":
    main()

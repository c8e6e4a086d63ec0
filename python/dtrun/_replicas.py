"""dtrun.check_replicas: DDP replicas must hold bit-identical parameters and optimizer state after
every step; a rank that does not was silently corrupted. Every rank fingerprints its own state
(XXH3 over the tensors' bytes) and the ranks compare: one all-reduce of four numbers when they
agree, a second to learn every rank's fingerprint when they do not.
"""

import hashlib
import sys


class ReplicaMismatch(RuntimeError):
    """The replicas' states differ; the message names the ranks and their fingerprints."""


def _tensors(model, optimizer):
    for p in model.parameters():
        yield p
    if optimizer is not None:
        for group in optimizer.param_groups:
            for p in group["params"]:
                for value in optimizer.state.get(p, {}).values():
                    if hasattr(value, "data_ptr"):
                        yield value


def fingerprint(model, optimizer, hash_at):
    import torch

    h = hashlib.blake2b(digest_size=8) if hash_at is None else None
    parts = []
    with torch.no_grad():
        for t in _tensors(model, optimizer):
            c = t.detach().to("cpu").contiguous()
            if h is not None:
                h.update(c.view(torch.uint8).numpy().tobytes() if c.numel() else b"")
            else:
                parts.append(hash_at(c.data_ptr(), c.numel() * c.element_size()))
    if h is not None:
        return int.from_bytes(h.digest(), "little")
    folded = 0
    for p in parts:
        folded = (folded * 1099511628211 ^ p) & 0xFFFFFFFFFFFFFFFF
    return folded


def vote(by_rank):
    """(majority or None, the ranks that differ from it; every rank when there is none)."""
    counts = {}
    for f in by_rank:
        counts[f] = counts.get(f, 0) + 1
    majority = next((f for f, n in counts.items() if 2 * n > len(by_rank)), None)
    return majority, [r for r, f in enumerate(by_rank) if majority is None or f != majority]


def check(dist, device, model, optimizer, step, hash_at, send):
    import torch

    rank, world = dist.get_rank(), dist.get_world_size()
    mine = fingerprint(model, optimizer, hash_at)
    hi, lo = float(mine >> 32), float(mine & 0xFFFFFFFF)
    t = torch.tensor([hi, lo, -hi, -lo], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if t[0].item() == -t[2].item() and t[1].item() == -t[3].item():
        return
    slots = torch.zeros(2 * world, dtype=torch.float64, device=device)
    slots[2 * rank], slots[2 * rank + 1] = hi, lo
    dist.all_reduce(slots)
    by_rank = [(int(slots[2 * r].item()) << 32) | int(slots[2 * r + 1].item()) for r in range(world)]
    majority, differing = vote(by_rank)
    if rank in differing:
        send("diverged step=%d fingerprint=%016x majority=%s"
             % (step, mine, "none" if majority is None else "%016x" % majority))
    who = ", ".join("rank %d (%016x)" % (r, by_rank[r]) for r in differing[:8])
    if len(differing) > 8:
        who += ", and %d more" % (len(differing) - 8)
    if majority is None:
        line = "the replicas diverged at step %d: %s disagree with no majority" % (step, who)
    else:
        line = ("the replicas diverged at step %d: %s hold(s) other parameters or optimizer state than the %d "
                "other rank(s) (%016x)" % (step, who, world - len(differing), majority))
    if rank == 0 or rank in differing:
        sys.stderr.write("rank %d: %s\n" % (rank, line))
        sys.stderr.flush()
    raise ReplicaMismatch(line)

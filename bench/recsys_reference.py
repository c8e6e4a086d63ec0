#!/usr/bin/python3
"""The Python reference for train_recsys: the same model, data split, losses and metrics in PyTorch
with DistributedDataParallel (dense embedding gradients, as a plain PyTorch script has them), for a
side-by-side comparison of ratings/s and quality. Run it as torchrun would:

  torchrun --standalone --nproc_per_node 2 bench/recsys_reference.py ratings.csv --epochs 5
  (or: dtrun --standalone --nproc-per-node 2 /usr/bin/python3 bench/recsys_reference.py ...)

Model: user/item embeddings (32) + per-user/item biases, an MLP (96 -> 64 -> 32) over
[u, i, u*i] with a rating head (global mean + biases + MLP) and an interaction head; loss = MSE on
ratings + BCE against 4 uniformly sampled items per rating; Adam (lr 2e-3, weight decay 1e-4).
With --sparse, the way PyTorch users train large tables: the embeddings give sparse gradients
(nn.Embedding(sparse=True)), which DDP all-reduces as sparse tensors, and torch.optim.SparseAdam
updates only the rows a step used (no weight decay: SparseAdam has none); Adam keeps the MLP.
Split: per user by (timestamp, movieId), the latest 10% (at least one) is test. Metrics: test RMSE,
and HR@10 / NDCG@10 of each user's latest rating among 99 sampled unrated items.

Recovery the way a torchrun user has it (bench/node_loss.py --launcher torchrun): with
--checkpoint-dir, rank 0 saves model, optimizer and step there every --checkpoint-every steps
(torch.save, atomic rename) and every rank loads it when it starts; with --print-steps rank 0
prints "start at step N" once loaded and "step N" after every step.
"""
import argparse
import csv
import math
import os
import random
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_ratings(path):
    users, items, rows = {}, {}, []
    seen = set()
    with open(path, newline="") as f:
        for n, row in enumerate(csv.reader(f)):
            if n == 0 and row and row[0][:1].isalpha():
                continue
            try:
                u, i, r, t = int(row[0]), int(row[1]), float(row[2]), int(row[3])
            except (ValueError, IndexError):
                continue
            u = users.setdefault(u, len(users))
            i = items.setdefault(i, len(items))
            if (u, i) in seen:
                continue
            seen.add((u, i))
            rows.append((u, i, r, t))
    return rows, len(users), len(items)


def split_by_time(rows, num_users, test_fraction=0.1):
    by_user = [[] for _ in range(num_users)]
    for row in rows:
        by_user[row[0]].append(row)
    train, test, targets = [], [], []
    for rs in by_user:
        rs.sort(key=lambda r: (r[3], r[1]))
        k = 0 if len(rs) < 2 else min(max(round(test_fraction * len(rs)), 1), len(rs) - 1)
        train += rs[:len(rs) - k]
        test += rs[len(rs) - k:]
        if k:
            targets.append(rs[-1])
    return train, test, targets


class Ncf(nn.Module):
    def __init__(self, users, items, dim, mean, sparse=False):
        super().__init__()
        self.user, self.item = nn.Embedding(users, dim, sparse=sparse), nn.Embedding(items, dim, sparse=sparse)
        self.user_bias, self.item_bias = nn.Embedding(users, 1, sparse=sparse), nn.Embedding(items, 1, sparse=sparse)
        for e in (self.user, self.item):
            nn.init.normal_(e.weight, 0, 0.05)
        for e in (self.user_bias, self.item_bias):
            nn.init.zeros_(e.weight)
        self.mlp = nn.Sequential(nn.Linear(3 * dim, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.rating_head, self.interaction_head = nn.Linear(32, 1), nn.Linear(32, 1)
        self.register_buffer("global_mean", torch.full((1,), mean))

    def forward(self, u, i):
        eu, ei = self.user(u), self.item(i)
        h = self.mlp(torch.cat([eu, ei, eu * ei], 1))
        bias = self.user_bias(u).squeeze(1) + self.item_bias(i).squeeze(1)
        return self.global_mean + bias + self.rating_head(h).squeeze(1), self.interaction_head(h).squeeze(1)


class MultiOptimizer:
    """Adam over every parameter, or with sparse=True SparseAdam over the embeddings and Adam over the rest."""

    def __init__(self, model, sparse):
        tables = [e.weight for e in (model.user, model.item, model.user_bias, model.item_bias)] if sparse else []
        rest = [p for p in model.parameters() if all(p is not t for t in tables)]
        self.optimizers = [torch.optim.Adam(rest, lr=2e-3, weight_decay=1e-4)]
        if tables:
            self.optimizers.append(torch.optim.SparseAdam(tables, lr=2e-3))

    def zero_grad(self, set_to_none=True):
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def step(self):
        for o in self.optimizers:
            o.step()

    def state_dict(self):
        return [o.state_dict() for o in self.optimizers]

    def load_state_dict(self, saved):
        if isinstance(saved, dict):  # a checkpoint from before --sparse: Adam alone
            saved = [saved]
        for o, s in zip(self.optimizers, saved):
            o.load_state_dict(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ratings")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("-b", "--batch-size", type=int, default=256)
    p.add_argument("--timed-iters", type=int, default=0, help="time this many steps (after 5), print, stop")
    p.add_argument("--checkpoint-dir", default="", help="save and resume here (a directory every host reads)")
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--print-steps", action="store_true", help="rank 0 prints every step")
    p.add_argument("--sparse", action="store_true", help="sparse embedding gradients and SparseAdam for them")
    args = p.parse_args()
    torch.manual_seed(0)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    rows, num_users, num_items = read_ratings(args.ratings)
    train, test, targets = split_by_time(rows, num_users)
    mean = sum(r[2] for r in train) / len(train)
    model = Ncf(num_users, num_items, 32, mean, args.sparse)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = MultiOptimizer(model, args.sparse)
    b, k = args.batch_size, 4
    steps = len(train) // world // b
    rated = [set() for _ in range(num_users)]
    for u, i, _, _ in rows:
        rated[u].add(i)
    step_count, start = 0, None
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt") if args.checkpoint_dir else ""
    if path and os.path.exists(path):
        saved = torch.load(path, map_location="cpu")
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        step_count = saved["step"]
    if args.print_steps and rank == 0:
        print(f"start at step {step_count}", flush=True)
    for epoch in range(step_count // steps, args.epochs):
        order = list(range(len(train)))
        random.Random(epoch).shuffle(order)
        mine = order[rank::world][:steps * b]
        t0 = time.time()
        for s in range(step_count - epoch * steps if step_count > epoch * steps else 0, steps):
            batch = [train[j] for j in mine[s * b:(s + 1) * b]]
            u = torch.tensor([r[0] for r in batch])
            i = torch.tensor([r[1] for r in batch])
            r = torch.tensor([r[2] for r in batch])
            uu = torch.cat([u, u.repeat_interleave(k)])
            ii = torch.cat([i, torch.randint(0, num_items, (b * k,))])
            labels = torch.cat([torch.ones(b), torch.zeros(b * k)])
            rating, logit = ddp(uu, ii)
            loss = F.mse_loss(rating[:b], r) + F.binary_cross_entropy_with_logits(logit, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step_count += 1
            if args.print_steps and rank == 0:
                print(f"step {step_count}", flush=True)
            if path and step_count % args.checkpoint_every == 0 and rank == 0:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step_count},
                           path + ".tmp")
                os.replace(path + ".tmp", path)
            if args.timed_iters and step_count == 5:
                if world > 1:
                    dist.barrier()
                start = time.time()
            if args.timed_iters and step_count == 5 + args.timed_iters:
                if world > 1:
                    dist.barrier()
                secs = time.time() - start
                if rank == 0:
                    print(f"benchmark: {args.timed_iters} timed steps, {args.timed_iters * b * world / secs:.0f} "
                          f"ratings/s (global), {1000 * secs / args.timed_iters:.2f} ms/step", flush=True)
                return
        # Evaluation: this rank's share, summed over ranks.
        model.eval()
        with torch.no_grad():
            mine_test = test[rank::world]
            pred, _ = model(torch.tensor([t[0] for t in mine_test]), torch.tensor([t[1] for t in mine_test]))
            sq = float(((pred.clamp(0, 10) - torch.tensor([t[2] for t in mine_test])) ** 2).sum())
            hits = ndcg = 0.0
            rng = random.Random(12345)
            for tu, ti, _, _ in targets[rank::world]:
                negs = []
                while len(negs) < 99:
                    c = rng.randrange(num_items)
                    if c not in rated[tu] and c not in negs:
                        negs.append(c)
                _, logits = model(torch.full((100,), tu), torch.tensor([ti] + negs))
                above = int((logits[1:] > logits[0]).sum())
                if above < 10:
                    hits += 1
                    ndcg += 1 / math.log2(above + 2)
            sums = torch.tensor([sq, len(mine_test), hits, ndcg, len(targets[rank::world])], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(sums)
        model.train()
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps in {time.time() - t0:.1f}s, test rmse {math.sqrt(sums[0] / sums[1]):.4f} "
                  f"HR@10 {100 * sums[2] / sums[4]:.2f}% NDCG@10 {100 * sums[3] / sums[4]:.2f}%", flush=True)


if __name__ == "__main__":
    main()

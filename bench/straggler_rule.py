#!/usr/bin/env python3
"""The straggler judge's naming rule on simulated DDP steps: the old rule (a majority of the window)
beside the one in straggler/straggler_judge.cc (the majority, and a count chance alone gives less
than ALPHA of the time), and that rule with the watch's sustained judge beside it (ten windows, no
majority, a count chance gives any rank less than SUSTAINED_ALPHA of the time, a cost of at least
MAJORITY x MARGIN_FRACTION of the step time). A model of the judge, not the judge: it exists to
show where each rule names somebody, for the table in docs/DESIGN.md ("What chance gives").

    bench/straggler_rule.py [--steps 2000] [--seed 1]

Steps as tests/straggler/straggler_judge_test.cc makes them: each rank computes 200 ms (times its
slowdown) plus |N(0, jitter)|, then waits in the all-reduce for the last one. For each world size
and jitter it prints, per rule: how many clean steps had somebody named, and the step at which a
rank slowed by 30% and by 10% was first named (- for not within 40 and 300 steps).
"""
import argparse
import math
import random

WINDOW, MAJORITY, KEEP, MARGIN_FRACTION, MARGIN_FLOOR, ALPHA = 20, 0.5, 0.3, 0.05, 0.002, 0.001
SUSTAINED_WINDOWS, SUSTAINED_ALPHA = 10, 1e-4


def chance_of_at_least(n, k, p):
    return sum(math.comb(k, i) * p**i * (1 - p) ** (k - i) for i in range(n, k + 1))


class Judge:
    """One judge: `rule` "old" (the majority alone), "new" (and chance), "sustained" (chance over ten windows)."""

    def __init__(self, rule, world):
        self.rule, self.world, self.window, self.named = rule, world, [], None
        self.size = WINDOW * SUSTAINED_WINDOWS if rule == "sustained" else WINDOW

    def add(self, last, lead, step_s):
        margin = max(MARGIN_FRACTION * step_s, MARGIN_FLOOR)
        self.window = (self.window + [(last if lead >= margin else -1, lead, step_s)])[-self.size:]
        if len(self.window) < WINDOW:
            return None
        counts = {}
        for r, _, _ in self.window:
            if r >= 0:
                counts[r] = counts.get(r, 0) + 1
        with_last = sum(counts.values())
        p = 1 / self.world

        def most_others(rank):
            return max([n for r, n in counts.items() if r != rank] + [0])

        def cost(rank):
            return sum(lead for r, lead, _ in self.window if r == rank) / sum(s for _, _, s in self.window)

        sustained = self.rule == "sustained"
        keep = 0 if sustained else KEEP * len(self.window)
        majority = 0 if sustained else MAJORITY * len(self.window)
        # The sustained judge's alphas bound how often chance gives the count to any of the ranks.
        alpha = SUSTAINED_ALPHA * p if sustained else ALPHA if self.rule == "new" else 2
        keep_alpha = ALPHA * p if sustained else 2
        n = counts.get(self.named, 0)
        if self.named is not None and n >= keep and (self.rule == "old" or n > most_others(self.named)) and (
                keep_alpha > 1 or chance_of_at_least(n, with_last, p) < keep_alpha):
            return self.named
        self.named = None
        for rank, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if n < majority or (alpha <= 1 and chance_of_at_least(n, with_last, p) >= alpha):
                break
            if not sustained or cost(rank) >= MAJORITY * MARGIN_FRACTION:
                self.named = rank
                break
        return self.named


def run(rule, world, jitter, steps, seed, slow=-1, slowdown=1.0):
    """Returns (steps with somebody named, the first step named or None)."""
    rng = random.Random(seed)
    judges = [Judge("old" if rule == "old" else "new", world)] + ([Judge("sustained", world)] if rule == "+sust" else [])
    first, blamed_steps = None, 0
    for step in range(1, steps + 1):
        arrive = [0.2 * (slowdown if r == slow else 1) + abs(rng.gauss(0, jitter)) for r in range(world)]
        all_in = max(arrive)
        wait = [all_in - a for a in arrive]
        last = min(range(world), key=lambda r: wait[r])
        lead = min(wait[r] for r in range(world) if r != last) - wait[last]
        verdicts = [j.add(last, lead, all_in + 0.01) for j in judges]
        if any(v is not None for v in verdicts):
            blamed_steps += 1
            first = first or step
    return blamed_steps, first


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'world':>5} {'jitter':>6} {'rule':>5} {'clean steps named':>18} {'30% slow named at':>18} "
          f"{'10% slow named at':>18}")
    for world in (2, 4, 8):
        for jitter in (0.01, 0.03, 0.05, 0.1):
            for rule in ("old", "new", "+sust"):
                clean, _ = run(rule, world, jitter, args.steps, args.seed)
                _, slow30 = run(rule, world, jitter, 40, args.seed, world - 1, 1.3)
                _, slow10 = run(rule, world, jitter, 300, args.seed, world - 1, 1.1)
                print(f"{world:>5} {jitter:>6} {rule:>5} {clean:>12} of {args.steps:<4} {slow30 or '-':>18} "
                      f"{slow10 or '-':>18}")


if __name__ == "__main__":
    main()

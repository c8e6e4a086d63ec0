#!/usr/bin/env python3
"""The straggler judge's naming rule on simulated DDP steps: the old rule (a majority of the window)
beside the one in straggler/straggler_judge.cc (the majority, and a count chance alone gives less
than ALPHA of the time). A model of the judge, not the judge: it exists to show where each rule
names somebody, for the table in docs/DESIGN.md ("What chance gives").

    bench/straggler_rule.py [--steps 2000] [--seed 1]

Steps as tests/straggler/straggler_judge_test.cc makes them: each rank computes 200 ms (times its
slowdown) plus |N(0, jitter)|, then waits in the all-reduce for the last one. For each world size
and jitter it prints, per rule: how many clean steps had somebody named, and the step at which a
rank slowed by 30% and by 10% was first named (- for not within 40 and 100 steps).
"""
import argparse
import math
import random

WINDOW, MAJORITY, KEEP, MARGIN_FRACTION, MARGIN_FLOOR, ALPHA = 20, 0.5, 0.3, 0.05, 0.002, 0.001


def chance_of_at_least(n, k, p):
    return sum(math.comb(k, i) * p**i * (1 - p) ** (k - i) for i in range(n, k + 1))


def run(rule, world, jitter, steps, seed, slow=-1, slowdown=1.0):
    """Returns (steps with somebody named, the first step named or None)."""
    rng = random.Random(seed)
    window, named, first, blamed_steps = [], None, None, 0
    for step in range(1, steps + 1):
        arrive = [0.2 * (slowdown if r == slow else 1) + abs(rng.gauss(0, jitter)) for r in range(world)]
        all_in = max(arrive)
        wait = [all_in - a for a in arrive]
        last = min(range(world), key=lambda r: wait[r])
        lead = min(wait[r] for r in range(world) if r != last) - wait[last]
        margin = max(MARGIN_FRACTION * (all_in + 0.01), MARGIN_FLOOR)
        window = (window + [last if lead >= margin else -1])[-WINDOW:]
        if len(window) < WINDOW:
            continue
        counts = {}
        for r in window:
            if r >= 0:
                counts[r] = counts.get(r, 0) + 1
        with_last = sum(counts.values())

        def most_others(rank):
            return max([n for r, n in counts.items() if r != rank] + [0])

        verdict = None
        if named is not None and counts.get(named, 0) >= KEEP * WINDOW and (
                rule == "old" or counts[named] > most_others(named)):
            verdict = named
        else:
            for rank, n in counts.items():
                if n >= MAJORITY * WINDOW and (
                        rule == "old" or chance_of_at_least(n, with_last, 1 / world) < ALPHA):
                    verdict = rank
                    break
        named = verdict
        if named is not None:
            blamed_steps += 1
            first = first or step
    return blamed_steps, first


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'world':>5} {'jitter':>6} {'rule':>4} {'clean steps named':>18} {'30% slow named at':>18} "
          f"{'10% slow named at':>18}")
    for world in (2, 4, 8):
        for jitter in (0.01, 0.03, 0.05, 0.1):
            for rule in ("old", "new"):
                clean, _ = run(rule, world, jitter, args.steps, args.seed)
                _, slow30 = run(rule, world, jitter, 40, args.seed, world - 1, 1.3)
                _, slow10 = run(rule, world, jitter, 100, args.seed, world - 1, 1.1)
                print(f"{world:>5} {jitter:>6} {rule:>4} {clean:>12} of {args.steps:<4} {slow30 or '-':>18} "
                      f"{slow10 or '-':>18}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What in-memory snapshots and their buddy copies cost training, on a network-namespace cluster
(needs root).

NODES hosts x 2 workers under dtrun, static, no fault: --job recsys (train_recsys, NCF on generated
ratings, batch 256: 2.1 MB snapshots) or --job imagenet (train_imagenet, ResNet-18 on 64 px
synthetic images, batch 32: 89.5 MB snapshots), DDP over Gloo, in three modes, interleaved over rounds so that a drift of the machine
falls on all of them alike:
  off        --snapshot-memory 0: no snapshots, nothing copied
  snapshots  --snapshot-buddy-every 0: snapshots in memory (adaptive cadence), no buddy copies
  buddy      the defaults: snapshots, and every 10th step's copied to the buddy node
  buddy:N    the same with --snapshot-buddy-every N
Throughput is rank 0's steps per second between its printed steps FROM and TO (arrival times of
its progress lines); cost = 1 - mode / off.

  sudo bench/replication_cost.py BUILD_DIR [--job recsys|imagenet] [--nodes 4] [--rounds 2]
                                 [--modes off,snapshots,buddy,buddy:100] [--from-step 60] [--to-step 360]
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_loss import keep_alive_conf, PORT, STEP, Cluster, Node, find_printer, global_step, make_ratings  # noqa: E402

MODES = [("off", ["--snapshot-memory", "0"]), ("snapshots", ["--snapshot-buddy-every", "0"]), ("buddy", [])]


def flags_of(mode):
    """dtrun's flags for a mode: one of MODES, or buddy:N."""
    if mode.startswith("buddy:") and mode[6:].isdigit():
        return ["--snapshot-buddy-every", mode[6:]]
    known = dict(MODES)
    if mode not in known:
        raise SystemExit(f"unknown mode {mode!r}: expected off, snapshots, buddy or buddy:N")
    return known[mode]


def trainer(args, ratings):
    if args.job == "imagenet":
        return [os.path.join(args.build_dir, "bin", "train_imagenet"), "--synthetic", "--synthetic-size", "100000",
                "--image-size", "64", "-b", "32", "-j", "1", "--epochs", "1", "--no-tensorboard"]
    return [os.path.join(args.build_dir, "bin", "train_recsys"), ratings, "--epochs", "100", "-b", "256",
            "--no-tensorboard"]


def steps_per_second(args, cluster, ratings, tmp, tag, flags):
    n = args.nodes
    nodes = []
    for i in range(n):
        argv = [os.path.join(args.build_dir, "bin", "dtrun"), "--nnodes", str(n), "--node-rank", str(i),
                "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{cluster.addrs[0]}:{PORT}",
                "--rdzv-id", tag, "--local-addr", cluster.addrs[i], "--rdzv-token", "tok", "--rdzv-conf", keep_alive_conf(),
                *flags, *trainer(args, ratings), "-p", "1", "--save-every-minutes", "1000", "--output-dir",
                f"{tmp}/{tag}.out{i}"]
        nodes.append(Node(cluster, i, argv, dict(os.environ, OMP_NUM_THREADS="1")))
    try:
        # The rendezvous gives out group ranks in join order: rank 0 may be on any host.
        printer = find_printer(nodes, STEP)

        def arrival(step, timeout):
            hit = printer.wait_timed(lambda l: True if (m := STEP.search(l)) and global_step(m) >= step else None,
                                     timeout)
            if hit is None:
                raise SystemExit(f"{tag}: step {step} never came:\n" + printer.text()[-3000:])
            return hit[0]

        first = arrival(args.from_step, 240)
        last = arrival(args.to_step, 600)
        return (args.to_step - args.from_step) / (last - first)
    finally:
        for i in range(n):
            cluster.kill_all(i, wait=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--job", choices=["recsys", "imagenet"], default="recsys")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default=",".join(name for name, _ in MODES), help="some of off,snapshots,buddy,buddy:N")
    ap.add_argument("--from-step", type=int, default=60)
    ap.add_argument("--to-step", type=int, default=360)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("replication_cost.py needs root (network namespaces)")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {args.nodes} nodes x 2 workers, --job {args.job}; "
          f"steps {args.from_step}..{args.to_step} of rank 0; {args.rounds} interleaved rounds", flush=True)
    modes = args.modes.split(",")
    rates = {mode: [] for mode in modes}
    for mode in modes:
        flags_of(mode)  # refused before the cluster is made
    cluster = Cluster(args.nodes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ratings = make_ratings(args.build_dir, tmp)
            for r in range(args.rounds):
                for i, mode in enumerate(modes):
                    rate = steps_per_second(args, cluster, ratings, tmp, f"c{r}m{i}", flags_of(mode))
                    rates[mode].append(rate)
                    print(f"  round {r + 1} {mode}: {rate:.2f} steps/s", file=sys.stderr, flush=True)
    finally:
        cluster.close()
    base = statistics.mean(rates["off"]) if rates.get("off") else None
    for mode in modes:
        mean = statistics.mean(rates[mode])
        print(f"{mode}: {mean:.2f} steps/s ({', '.join(f'{x:.2f}' for x in rates[mode])})" +
              (f"; cost {100 * (1 - mean / base):+.1f}%" if base else ""), flush=True)


if __name__ == "__main__":
    main()

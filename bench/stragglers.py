#!/usr/bin/env python3
"""Naming the straggler, on a network-namespace cluster (needs root).

NODES hosts x 2 workers of train_recsys (NCF on generated ratings, DDP over Gloo) under dtrun,
in its benchmark mode (--timed-iters: a fixed number of steps, then ratings/s). Three measurements:
  clean    STEPS clean steps: how many times dtrun named a straggler (false blames), and the job's
           ratings/s with the all-reduce wait reports (the default) and without them
           (DTRUN_SYNC_REPORTS=0), interleaved: their cost;
  slow     one random rank slowed by SLOWDOWN of the clean step time from step K on (the worker
           library's test fault DTRUN_FAULT_SLOW sleeps before its backward): the rank named, the
           steps of its slowed run the judge needed (named_at_step - K), and the step the agents
           had reached when they logged it;
  node     a random host's processes (dtrun and its workers) in a cgroup (v1 cpu) whose quota is
           NODE_QUOTA of one core, from the start: what is named (the node, as a node) and when;
  link     a random host's outgoing link limited to LINK_RATE (tc tbf; this VM's kernel has no
           netem): what is named. The rank just downstream of the slow link arrives last, so it
           should be named as a slow link near its node (kind "link"), not as a slow rank.
Every node's event log is read; the namespaces share one clock.

  sudo bench/stragglers.py BUILD_DIR [--nodes 4] [--trials 5] [--clean-steps 2000] [--slowdown 0.3]
                           [--modes clean,cost,slow,node,link] [--node-quota 0.35] [--link-rate 50mbit]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from node_loss import keep_alive_conf, PORT, Cluster, Node, make_ratings  # noqa: E402


CGROUP = "/sys/fs/cgroup/cpu/dtrun_straggler_bench"


def run_job(args, cluster, ratings, tmp, steps, env_extra, tag, slow_host=-1):
    """One job of `steps` timed steps; returns (ratings/s, ms/step, every node's event records)."""
    n = args.nodes
    endpoint = f"{cluster.addrs[0]}:{PORT}"
    nodes = []
    for i in range(n):
        argv = [os.path.join(args.build_dir, "bin", "dtrun"), "--nnodes", str(n), "--node-rank", str(i),
                "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", tag,
                "--local-addr", cluster.addrs[i], "--rdzv-token", "tok", "--rdzv-conf", keep_alive_conf(),
                "--event-log", f"{tmp}/{tag}.events{i}.jsonl",
                os.path.join(args.build_dir, "bin", "train_recsys"), ratings, "--epochs", "100000", "-b", "256",
                "--warmup-iters", "20", "--timed-iters", str(steps), "--no-tensorboard",
                "--bench-json", f"{tmp}/{tag}.bench{i}.json", "--output-dir", f"{tmp}/{tag}.out{i}"]
        nodes.append(Node(cluster, i, argv, dict(os.environ, OMP_NUM_THREADS="1", **env_extra)))
        if i == slow_host:
            # The whole host into the quota'd cgroup, from outside the namespace (`ip netns exec`
            # mounts its own /sys), before dtrun starts any worker: they inherit it.
            with open(f"{CGROUP}/cgroup.procs", "w") as f:
                f.write(str(nodes[-1].proc.pid))
    for i, node in enumerate(nodes):
        if node.proc.wait(timeout=steps * 2 + 300) != 0:
            raise SystemExit(f"{tag}: host {i} failed:\n" + node.text()[-3000:])
    bench = next(json.load(open(f"{tmp}/{tag}.bench{i}.json")) for i in range(n)
                 if os.path.exists(f"{tmp}/{tag}.bench{i}.json"))
    events = []
    for i in range(n):
        with open(f"{tmp}/{tag}.events{i}.jsonl") as f:
            events += [dict(json.loads(line), host=i) for line in f if line.strip()]
    return bench["ratings_per_s"], bench["ms_per_step"], events, nodes


def named(events):
    return [e for e in events if e.get("event") == "straggler"]


def name_sequence(events):
    """What was named, in time order, as (rank, node, kind, named_at_step) without repeats across hosts."""
    seq = []
    for e in sorted(named(events), key=lambda e: e["ts_ms"]):
        key = (e["rank"], e["node"], e.get("kind"), e.get("named_at_step"))
        if key not in seq:
            seq.append(key)
    return seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--clean-steps", type=int, default=2000)
    ap.add_argument("--cost-rounds", type=int, default=2, help="interleaved on/off pairs for the cost")
    ap.add_argument("--cost-steps", type=int, default=600)
    ap.add_argument("--slowdown", type=float, default=0.3)
    ap.add_argument("--slow-from", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--modes", default="clean,cost,slow,node,link")
    ap.add_argument("--node-quota", type=float, default=0.35, help="of one core, for the slowed host")
    ap.add_argument("--link-rate", default="50mbit", help="tc tbf rate of the slowed host's link")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("stragglers.py needs root (network namespaces)")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    world = 2 * args.nodes
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {args.nodes} nodes x 2 workers of train_recsys (batch 256), "
          f"--rdzv-conf {keep_alive_conf()}", flush=True)
    rng = random.Random(args.seed)
    cluster = Cluster(args.nodes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ratings = make_ratings(args.build_dir, tmp)
            modes = args.modes.split(",")
            # Clean: false blames over a long run (and the step time the slowdowns are sized by).
            steps = args.clean_steps if "clean" in modes else 300
            per_s, ms, events, _ = run_job(args, cluster, ratings, tmp, steps, {}, "clean")
            blames = named(events)
            print(f"clean: {steps} steps, {ms:.1f} ms/step, {per_s:.0f} ratings/s; named a straggler "
                  f"{len(blames)} times" + (f": {[(e['rank'], e['step']) for e in blames]}" if blames else ""),
                  flush=True)
            step_ms = ms
            # Cost of the reports: interleaved pairs.
            on, off = [], []
            for r in range(args.cost_rounds if "cost" in modes else 0):
                for mode, env, out in (("on", {}, on), ("off", {"DTRUN_SYNC_REPORTS": "0"}, off)):
                    rate, _, _, _ = run_job(args, cluster, ratings, tmp, args.cost_steps, env, f"cost{r}{mode}")
                    out.append(rate)
                    print(f"  cost round {r + 1} reports {mode}: {rate:.0f} ratings/s", file=sys.stderr, flush=True)
            if on:
                cost = 1 - statistics.mean(on) / statistics.mean(off)
                print(f"cost of the wait reports: {statistics.mean(on):.0f} against {statistics.mean(off):.0f} ratings/s "
                      f"without them ({cost * 100:+.1f}%; rounds on {[round(x) for x in on]}, off "
                      f"{[round(x) for x in off]})", flush=True)
            # Slowed ranks.
            sleep_ms = max(1, round(args.slowdown * step_ms))
            rows = []
            for t in range(args.trials if "slow" in modes else 0):
                victim = rng.randrange(world)
                fault = f"{victim}:{args.slow_from}:{sleep_ms}"
                start = time.time()
                _, ms_slow, events, nodes = run_job(args, cluster, ratings, tmp, args.slow_from + 200,
                                                    {"DTRUN_FAULT_SLOW": fault}, f"slow{t}")
                first = min(named(events), key=lambda e: e["ts_ms"], default=None)
                wrong = [e for e in named(events) if e["rank"] != victim or e.get("kind") != "rank"]
                row = {"victim": victim, "sleep_ms": sleep_ms, "named": first["rank"] if first else None,
                       "judged_steps": first["named_at_step"] - args.slow_from if first else None,
                       "logged_at_step": first["step"] - args.slow_from if first else None,
                       "cost_share": round(first["cost_share"], 3) if first else None,
                       "wrong_names": len(wrong), "ms_per_step": round(ms_slow, 1),
                       "names_in_order": [(r, k, at) for r, _, k, at in name_sequence(events)][:4]}
                rows.append(row)
                print(f"  slow #{t + 1}: {row}", file=sys.stderr, flush=True)
            if "slow" in modes:
                report_slow(args, rows, sleep_ms, step_ms)
            if "node" in modes:
                os.makedirs(CGROUP, exist_ok=True)
                with open(f"{CGROUP}/cpu.cfs_period_us", "w") as f:
                    f.write("100000")
                with open(f"{CGROUP}/cpu.cfs_quota_us", "w") as f:
                    f.write(str(int(args.node_quota * 100000)))
                for t in range(args.trials):
                    host = rng.randrange(1, args.nodes)
                    _, ms_slow, events, _ = run_job(args, cluster, ratings, tmp, 300, {}, f"node{t}", slow_host=host)
                    first = min(named(events), key=lambda e: e["ts_ms"], default=None)
                    print(f"  node #{t + 1}: host {host} ({cluster.addrs[host]}) at {args.node_quota:.0%} of a core, "
                          f"{ms_slow:.1f} ms/step: first named "
                          f"{(first['rank'], first['node'], first['named_at_step'], round(first['cost_share'], 3)) if first else None}; "
                          f"names in order {name_sequence(events)}", flush=True)
            if "link" in modes:
                for t in range(args.trials):
                    host = rng.randrange(1, args.nodes)
                    subprocess.run(["ip", "netns", "exec", cluster.ns(host), "tc", "qdisc", "add", "dev", "eth0", "root",
                                    "tbf", "rate", args.link_rate, "burst", "32kbit", "latency", "400ms"], check=True)
                    try:
                        _, ms_slow, events, _ = run_job(args, cluster, ratings, tmp, 300, {}, f"link{t}")
                    finally:
                        subprocess.run(["ip", "netns", "exec", cluster.ns(host), "tc", "qdisc", "del", "dev", "eth0",
                                        "root"], check=False)
                    print(f"  link #{t + 1}: host {host} ({cluster.addrs[host]}) limited to {args.link_rate}, "
                          f"{ms_slow:.1f} ms/step: names in order {name_sequence(events)}",
                          flush=True)
    finally:
        cluster.close()
        if os.path.isdir(CGROUP):
            os.rmdir(CGROUP)


def report_slow(args, rows, sleep_ms, step_ms):
    ok = [r for r in rows if r["named"] == r["victim"]]
    judged = [r["judged_steps"] for r in ok]
    logged = [r["logged_at_step"] for r in ok]
    print(f"slow by {args.slowdown:.0%} ({sleep_ms} ms of {step_ms:.1f} ms): named {len(ok)}/{len(rows)}; "
          f"judge needed median {statistics.median(judged) if judged else '-'} / max {max(judged, default='-')} "
          f"steps of the slowed run; logged at step +{statistics.median(logged) if logged else '-'} (median) / "
          f"+{max(logged, default='-')} (max); cost share median "
          f"{statistics.median([r['cost_share'] for r in ok]) if ok else '-'}; wrong names "
          f"{sum(r['wrong_names'] for r in rows)}", flush=True)


if __name__ == "__main__":
    main()

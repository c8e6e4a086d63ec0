#!/usr/bin/env python3
"""Multi-node launcher benchmarks on one machine (agents on loopback), dtrun vs torchrun (c10d).

  bench/multinode_bench.py BUILD_DIR [--agents 8]

1. formation: K agents started at once -> every worker started (restart_probe records starts).
2. job-wide restart: K agents x 1 worker; rank 0 fails on each of R attempts; latency from its exit
   to the last worker of the next round started, on all agents.
3. node loss: 2 agents with sleeping workers; SIGKILL agent 1; time until agent 0 reports it
   (dtrun: keep_alive_interval=1 s x 3 attempts). torchrun has no node-loss detection for healthy
   workers: measured with a 20 s cap.
Also: N real gRPC clients forming one round (bench/rdzv_load against `dtrun rdzv-server`).
"""
import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = [sys.executable if "python3" in sys.executable else "/usr/bin/python3",
            os.path.join(HERE, "..", "..", "shared", "tools", "torchrun")]


def read_probe(path):
    starts, exits, by_rank = {}, {}, {}
    for line in open(path):
        a, r, what, ns = line.split()
        a, r, ns = int(a), int(r), int(ns)
        if what == "exit":
            exits[a] = ns
        else:
            starts.setdefault(a, {})[r] = ns
            by_rank.setdefault(r, []).append(ns)
    return starts, exits, by_rank


def agents_cmd(kind, build, k, port, run_id, extra=()):
    probe = os.path.join(build, "bin", "restart_probe")
    if kind == "dtrun":
        base = [os.path.join(build, "bin", "dtrun"), "--nnodes", str(k), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                "--local-addr", "127.0.0.1"]
    else:
        base = TORCHRUN + ["--nnodes", str(k), "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                           "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", run_id,
                           "--monitor_interval", "0.1"]
    return base + list(extra) + (["--no_python"] if kind == "torchrun" else []) + [probe]


def run_agents(kind, build, k, port, restarts, extra=(), timeout=120):
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe")
        env = dict(os.environ, PROBE_FILE=probe, PROBE_RESTARTS=str(restarts), OMP_NUM_THREADS="1")
        cmd = agents_cmd(kind, build, k, port, f"b{port}",
                         (["--max-restarts" if kind == "dtrun" else "--max_restarts", str(restarts)]
                          + list(extra)))
        t0 = time.time_ns()
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True) for _ in range(k)]
        deadline = time.monotonic() + timeout
        hung = False
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung = True
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        return t0, read_probe(probe), hung


def formation(kind, build, k, port):
    t0, (starts, _, _), _ = run_agents(kind, build, k, port, 0)
    return (max(starts[0].values()) - t0) / 1e6


def restart(kind, build, k, port, restarts):
    _, (_, exits, by_rank), hung = run_agents(kind, build, k, port, restarts, timeout=60)
    # By time, not by restart count: torchrun's agents keep diverging counts. For each failure,
    # the latency is until every rank has started again.
    lat = []
    for t in sorted(exits.values()):
        nxt = [min((s for s in by_rank.get(r, []) if s > t), default=None) for r in range(k)]
        if None not in nxt:
            lat.append((max(nxt) - t) / 1e6)
    if not lat:
        return None
    return statistics.median(lat), max(lat), len(lat), hung


def node_loss(kind, build, port):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if kind == "dtrun":
        # {host}: agent a hosts the service, so killing b is a node loss (not a master loss).
        cmd = [os.path.join(build, "bin", "dtrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
               "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"l{port}", "--local-addr", "127.0.0.1",
               "--rdzv-conf", "keep_alive_interval=1,keep_alive_max_attempt=3,is_host={host}", "/bin/sh", "-c",
               "echo READY; exec sleep 300"]
        needle = "lost: no keep-alive"
    else:
        cmd = TORCHRUN + ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                          f"127.0.0.1:{port}", "--rdzv_id", f"l{port}", "--monitor_interval", "0.1", "--tee", "3",
                          "--no_python", "/bin/sh", "-c", "echo READY; exec sleep 300"]
        needle = "Rendezvous"
    a = subprocess.Popen([c.replace("{host}", "1") for c in cmd], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    b = subprocess.Popen([c.replace("{host}", "0") for c in cmd], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    for line in a.stdout:
        if b"READY" in line:
            break
    time.sleep(0.5)  # let b's worker start too (benchmark setup only)
    os.kill(b.pid, signal.SIGKILL)
    t0 = time.monotonic()
    os.set_blocking(a.stdout.fileno(), False)
    detected = None
    buf = b""
    while time.monotonic() - t0 < 20:
        chunk = os.read(a.stdout.fileno(), 65536) if select.select([a.stdout], [], [], 0.05)[0] else b""
        buf += chunk
        if needle.encode() in buf and kind == "dtrun":
            detected = time.monotonic() - t0
            break
    for p in (a, b):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
    return detected


def load(build, n, port):
    srv = subprocess.Popen([os.path.join(build, "bin", "dtrun"), "rdzv-server", "--rdzv-endpoint",
                            f"127.0.0.1:{port}", "--nnodes", str(n), "--rdzv-id", "load", "--rdzv-token", "t"],
                           stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()  # "serving ..."
    out = subprocess.run([os.path.join(build, "bin", "rdzv_load"), f"127.0.0.1:{port}", str(n), "load", "t"],
                         capture_output=True, text=True, check=True).stdout
    srv.send_signal(signal.SIGTERM)
    srv.wait()
    return float(out.split("round_formed_ms=")[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--restarts", type=int, default=10)
    args = ap.parse_args()
    b, k = os.path.abspath(args.build_dir), args.agents
    for n in (100, 1000):
        print(f"rdzv load: {n} gRPC clients formed one round in {load(b, n, 29700 + n % 97):.0f} ms")
    d, t = formation("dtrun", b, k, 29801), formation("torchrun", b, k, 29802)
    print(f"formation, {k} agents started together -> all workers started: dtrun {d:.0f} ms, "
          f"torchrun {t:.0f} ms ({t / d:.0f}x)")
    d = restart("dtrun", b, 4, 29803, args.restarts)
    t = restart("torchrun", b, 4, 29804, args.restarts)
    tr = ("no complete group restart within 60 s (survivors' workers were never restarted)" if t is None
          else f"median {t[0]:.0f} ms max {t[1]:.0f} ms (n={t[2]}{', then hung' if t[3] else ''})")
    print(f"job-wide restart, 4 agents: dtrun median {d[0]:.1f} ms max {d[1]:.1f} ms (n={d[2]}); torchrun {tr}")
    d = node_loss("dtrun", b, 29805)
    t = node_loss("torchrun", b, 29806)
    print(f"node loss (SIGKILL of an agent), keep-alive 1 s x 3: dtrun detected in {d:.2f} s; "
          f"torchrun: {'not detected within 20 s' if t is None else f'{t:.2f} s'}")


if __name__ == "__main__":
    sys.exit(main())

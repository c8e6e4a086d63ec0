#!/usr/bin/env python3
"""The rendezvous at cluster scale (issue 17): for each N, one fresh `dtrun rdzv-server` and
bench/rdzv_load with N simulated agents in several processes. Prints one markdown table row per N:
round formation, restart fan-out (a worker failure until every node holds the next round), late
joins and leaves, the service's CPU per keep-alive in the steady phase, and its peak RSS per node.

  bench/rdzv_scale.py BUILD_DIR [--nodes 1000,2000,4000,8000,10000] [--procs 4] [--late 10]
                      [--steady-seconds 15] [--status-rows] [--csv FILE]
"""
import argparse
import os
import subprocess
import sys


def run_one(build, nodes, procs, late, steady, status_rows, port):
    srv = subprocess.Popen(
        [os.path.join(build, "bin", "dtrun"), "rdzv-server", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--nnodes", f"{nodes}:{nodes + late}", "--max-restarts", "100", "--rdzv-id", "load", "--rdzv-token", "t",
         "--rdzv-conf", "last_call_timeout=0"],
        stdout=subprocess.PIPE, text=True)
    srv.stdout.readline()  # "serving ..."
    cmd = [os.path.join(build, "bin", "rdzv_load"), "--endpoint", f"127.0.0.1:{port}", "--nodes", str(nodes),
           "--procs", str(procs), "--late", str(late), "--steady-seconds", str(steady), "--server-pid", str(srv.pid)]
    if status_rows:
        cmd.append("--status-rows")
    load = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=900)
    srv.terminate()
    srv.wait()
    phases = {}
    for line in load.stdout.splitlines():
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        phases[fields.get("phase")] = fields
    if load.returncode != 0:
        sys.exit(f"rdzv_load failed at N={nodes}:\n{load.stdout}")
    return phases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nodes", default="1000,2000,4000,8000,10000")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--late", type=int, default=10)
    ap.add_argument("--steady-seconds", type=int, default=15)
    ap.add_argument("--status-rows", action="store_true")
    ap.add_argument("--csv")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    rows = []
    print("| nodes | round formed | restart reaches all | late join (+{0}) | {0} leave | keep-alives/s | "
          "service CPU per keep-alive | service CPU, formation per node | peak RSS | RSS per node |".format(args.late))
    print("|---|---|---|---|---|---|---|---|---|---|")
    for i, n in enumerate(int(x) for x in args.nodes.split(",")):
        p = run_one(build, n, args.procs, args.late, args.steady_seconds, args.status_rows, 29900 + i)
        steady = p.get("steady", {})
        ka = float(steady.get("keep_alives_per_s", 0)) or 1
        cpu_per_ka_us = float(steady.get("server_cpu_percent", 0)) / 100 / ka * 1e6
        row = dict(nodes=n, formation_ms=float(p["formation"]["ms"]), restart_ms=float(p["restart"]["ms"]),
                   late_join_ms=float(p.get("late_join", {}).get("ms", -1)), leave_ms=float(p.get("leave", {}).get("ms", -1)),
                   keep_alives_per_s=ka, cpu_us_per_keep_alive=cpu_per_ka_us,
                   formation_cpu_ms_per_node=float(p["formation"]["server_cpu_ms_per_node"]),
                   peak_rss_mib=float(p["memory"]["server_peak_rss_mib"]),
                   rss_kib_per_node=float(p["memory"]["server_rss_kib_per_node"]))
        rows.append(row)
        print(f"| {n:,} | {row['formation_ms']:.0f} ms | {row['restart_ms']:.0f} ms | {row['late_join_ms']:.0f} ms | "
              f"{row['leave_ms']:.0f} ms | {ka:.0f} | {cpu_per_ka_us:.0f} µs | {row['formation_cpu_ms_per_node']:.3f} ms | "
              f"{row['peak_rss_mib']:.0f} MiB | {row['rss_kib_per_node']:.1f} KiB |", flush=True)
        if "status_queries" in p:
            q = p["status_queries"]
            print(f"|   status: {q['rows']} rows, query median {q['query_ms_median']} ms, max {q['query_ms_max']} ms |")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write(",".join(rows[0].keys()) + "\n")
            for r in rows:
                f.write(",".join(str(v) for v in r.values()) + "\n")


if __name__ == "__main__":
    main()

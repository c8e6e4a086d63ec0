#!/usr/bin/env python3
"""Recovery from the loss of a node, on a network-namespace cluster (needs root).

NODES hosts x 2 workers of train_recsys (NCF on generated ratings) under dtrun, elastic
(--nnodes N:N) with one spare host, in-memory snapshots and buddy copies, no shared storage (each
host writes its own --output-dir). After every host is stepping and the victim's first buddy copy
has arrived, one fault is injected on a host other than the rendezvous host:
  kill    SIGKILL of every process of the host (its dtrun and its workers): the node is gone;
  cut     its link goes down (the agent lives on, cut off);
  freeze  SIGSTOP of one of its workers (caught by --heartbeat-timeout; the node stays);
  master  SIGKILL of every process of the rendezvous host (host 0), whose dtrun a supervisor
          starts again --restart-after seconds later (no spare: the job needs that host back;
          with --master-spare a spare waits too, and the new service must not let it take a
          survivor's place: whichever N hosts record a recovery count, and the trial says
          whether the spare was one of them);
  master2 the rendezvous host and another host killed together (they share a rack or a power
          feed): host 0's dtrun is started again --restart-after seconds later, the other host
          stays down, and the spare takes its place; the new service cannot know whether the
          other host is on its way, and waits for it a lease from its start (before: last call);
  cut2    its link goes down, and --second-after seconds later that of the host that keeps its
          buddy copies (a rack or switch failure: neighbours whose leases run out apart); the
          job is elastic N-1:N, so it goes on with the survivors and the spare.
  rack    the links of a whole rack go down at once (a leaf switch fails): the hosts are racks of
          --rack-size consecutive node ranks (placed by --node-rank, as Slurm places a job switch by
          switch), the lost rack is not the rendezvous host's, and as many spares as a rack holds
          (a rack of their own) wait to take over. With --domains on each node says its rack
          (--failure-domain), so buddies are in other racks; off: buddies are the next node rank,
          mostly in the same rack. Use --peers off to see what the buddy copies alone recover
          (ranks whose state is not replicated elsewhere: sharded optimizers, pipeline stages).
Measured per trial, from the nodes' event logs (`recovered` records, wall clock; the namespaces
share one clock): fault -> every rank stepping again (the last node's first step), where each
node's state came from (memory, buddy, disk, none), and lost steps (the step rank 0 had printed
at the fault minus the step restored).

With --launcher torchrun the same cluster runs the peer: ../shared/tools/torchrun (c10d rendezvous,
--nnodes N:N, the same spare) over bench/recsys_reference.py, the same NCF job in PyTorch, which
saves a checkpoint every --buddy-every steps into a directory every host reads (shared storage:
the best case a torchrun user has) and loads it when it starts. Each host gets its own hostname
(a UTS namespace) resolving to its address (/etc/netns/NAME/hosts), which torch 1.13's agent
needs for its workers' master address. Measured from the console: fault -> the first step the new
round's rank 0 prints (a DDP step: every rank took it), and lost steps (its "start at step").

With --shrink there is no spare: the job is elastic down to one node fewer (--nnodes N-1:N) and
goes on without the lost one (kill and cut only). Each survivor's ranks then resume in a smaller
world, from the in-memory snapshot the larger one took (the ranks are replicas), or, with
--peers off (DTRUN_SNAPSHOT_PEERS=off, as dtrun did before a world-size change could restore
memory), from the last disk checkpoint (train_recsys writes one per epoch here).

  sudo bench/node_loss.py BUILD_DIR [--nodes 4] [--trials 10] [--faults kill,cut,freeze,master,master2]
                          [--launcher dtrun|torchrun] [--shrink [--peers on|off]] [--restart-after S]
                          [--keep-alive S] [--second-after S] [--rack-size K] [--domains on|off]
                          [--fault-after STEP] [--master-spare]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PORT = 29600
HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = os.path.join(HERE, "..", "..", "shared", "tools", "torchrun")
KEEP_ALIVE_INTERVAL = 0.5  # the benches' (and node_loss.py's default --keep-alive)


def keep_alive_conf(interval=KEEP_ALIVE_INTERVAL):
    """dtrun's --rdzv-conf: keep-alives `interval` s apart (dtrun's default is 5), 4 misses."""
    return f"keep_alive_interval={interval:g},keep_alive_max_attempt=4,join_timeout=120"


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Cluster:
    """Hosts h0..hN-1 on one bridge (198.19.x.10+i), as tests/support/netns_cluster.cc builds them."""

    def __init__(self, hosts):
        self.prefix = f"nl{os.getpid() % 100000}"
        subnet = f"198.19.{os.getpid() % 250 + 1}."
        self.namespaces = [self.prefix + "sw"]
        ip("netns", "add", self.prefix + "sw")
        ip("-n", self.prefix + "sw", "link", "add", "br0", "type", "bridge")
        ip("-n", self.prefix + "sw", "link", "set", "br0", "up")
        self.addrs = []
        for i in range(hosts):
            ns, a, b = self.ns(i), f"{self.prefix}a{i}", f"{self.prefix}b{i}"
            ip("netns", "add", ns)
            self.namespaces.append(ns)
            ip("link", "add", a, "type", "veth", "peer", "name", b)
            ip("link", "set", a, "netns", ns, "name", "eth0")
            ip("link", "set", b, "netns", self.prefix + "sw")
            ip("-n", self.prefix + "sw", "link", "set", b, "master", "br0", "up")
            self.addrs.append(subnet + str(10 + i))
            ip("-n", ns, "addr", "add", self.addrs[-1] + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        # `ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts: each host's name resolves.
        names = "".join(f"{a} {self.ns(i)}\n" for i, a in enumerate(self.addrs))
        for i in range(hosts):
            os.makedirs(f"/etc/netns/{self.ns(i)}", exist_ok=True)
            with open(f"/etc/netns/{self.ns(i)}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n" + names)

    def ns(self, i):
        return f"{self.prefix}h{i}"

    def kill_all(self, i, wait=False):
        """SIGKILL to every process of host i; with `wait`, until none is left (the next trial binds its ports)."""
        deadline = time.time() + 10
        while True:
            pids = ip("netns", "pids", self.ns(i), check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if not wait or not pids or time.time() > deadline:
                return
            time.sleep(0.05)

    def link(self, i, up):
        ip("-n", self.ns(i), "link", "set", "eth0", "up" if up else "down")

    def close(self):
        for i in range(len(self.addrs)):
            self.kill_all(i)
        for ns in self.namespaces:
            ip("netns", "del", ns, check=False)
            if os.path.isdir(f"/etc/netns/{ns}"):
                shutil.rmtree(f"/etc/netns/{ns}")


class Node:
    """One host's dtrun, its merged output read on a thread, each line with its arrival time."""

    def __init__(self, cluster, i, argv, env):
        self.proc = subprocess.Popen(["ip", "netns", "exec", cluster.ns(i)] + argv, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
        self.lines = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append((time.time(), line))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.time(), None))
            self.cond.notify_all()

    def wait_until(self, found, timeout):
        """The first non-None `found(line)` over all lines, or None at `timeout` / at the end."""
        hit = self.wait_timed(found, timeout)
        return hit[1] if hit else None

    def wait_timed(self, found, timeout):
        """(arrival time, value) of the first line whose `found(line)` is not None, or None."""
        deadline = time.time() + timeout
        seen = 0
        with self.cond:
            while True:
                for t, line in self.lines[seen:]:
                    if line is None:
                        return None
                    value = found(line)
                    if value is not None:
                        return t, value
                seen = len(self.lines)
                left = deadline - time.time()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def wait_for(self, pattern, timeout):
        """The first match of `pattern` (a compiled regex), or None at `timeout` / at the end."""
        return self.wait_until(pattern.search, timeout)

    def text(self):
        with self.cond:
            return "".join(l for _, l in self.lines if l)

    def ended(self):
        """Whether its output has ended (dtrun exited)."""
        with self.cond:
            return bool(self.lines) and self.lines[-1][1] is None


STEP = re.compile(r"\[default0\]:Epoch: \[(\d+)\]\[(\d+)/(\d+)\]")


def global_step(m):
    return int(m.group(1)) * int(m.group(3)) + int(m.group(2))


def workers_of(cluster, i):
    """The worker pids of host i: the processes there whose environment has RANK set, parked ones aside."""
    out = []
    for pid in ip("netns", "pids", cluster.ns(i), check=False).stdout.split():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
                # Not a warm worker still parked (worker/warm_start.h): it belongs to no round yet.
                if any(e.startswith(b"RANK=") for e in env) and not any(e.startswith(b"DTRUN_PARK_FD=") for e in env):
                    out.append(int(pid))
        except OSError:
            pass
    return out


def make_ratings(build_dir, directory):
    """The generated ratings the cluster benches train train_recsys on (2000 users x 3000 items)."""
    ratings = os.path.join(directory, "ratings.csv")
    subprocess.run([os.path.join(build_dir, "bin", "dtdata"), "make-ratings", ratings, "--users", "2000", "--items",
                    "3000"], check=True, capture_output=True)
    return ratings


def find_printer(nodes, step_line):
    """The node whose output has rank 0's step lines (`step_line`), once the job steps."""
    deadline = time.time() + 240
    while time.time() < deadline:
        printer = next((node for node in nodes if node.wait_for(step_line, 0.5)), None)
        if printer is not None:
            return printer
        if all(node.ended() for node in nodes):  # a wait on an ended output returns at once
            break
    raise SystemExit("the job did not start:\n" + nodes[0].text()[-3000:])


def restart_master(args, fault_ms, start):
    """As a supervisor restarts the killed rendezvous host's launcher: --restart-after the fault."""
    time.sleep(max(0.0, fault_ms / 1000 + args.restart_after - time.time()))  # stands for the supervisor's delay
    return start(0)


def fault_at_random_step(args, cluster, printer, step_of, fault, victim, rng, also=None):
    """The fault at a random step 1..2 x buddy_every after the one rank 0 printed last (between two
    buddy copies); returns that step and the fault's time (ms since the epoch)."""
    with printer.cond:
        now = max(step_of(l) or 0 for _, l in printer.lines if l)
    target = max(now, args.fault_after) + rng.randint(1, 2 * args.buddy_every)
    reached = printer.wait_until(lambda l: s if (s := step_of(l)) is not None and s >= target else None, 120)
    if reached is None:
        raise SystemExit("rank 0 stopped stepping before the fault:\n" + printer.text()[-3000:])
    return reached, inject(cluster, fault, victim, also)


def inject(cluster, fault, victim, also=None):
    """The fault on host `victim` (and `also`, killed with it); returns its time (ms since the epoch)."""
    fault_ms = time.time() * 1000
    if also is not None:
        cluster.kill_all(also)
    if fault in ("kill", "master", "master2"):
        cluster.kill_all(victim, wait=fault.startswith("master"))  # a restarted master binds the same port
    elif fault in ("cut", "cut2"):
        cluster.link(victim, False)
    elif fault == "rack":
        for host in victim:  # one switch: every link of the rack at once
            cluster.link(host, False)
    else:
        os.kill(workers_of(cluster, victim)[0], signal.SIGSTOP)
    return fault_ms


REF_STEP = re.compile(r"^step (\d+)$")
REF_START = re.compile(r"^start at step (\d+)$")


def one_trial_torchrun(args, cluster, ratings, fault, trial, rng):
    """The peer: torchrun over bench/recsys_reference.py, checkpoints on shared storage."""
    n = args.nodes
    with tempfile.TemporaryDirectory() as tmp:
        endpoint = f"{cluster.addrs[0]}:{PORT + trial}"

        def start(i):
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', cluster.ns(i), "/usr/bin/python3",
                    TORCHRUN, "--nnodes", nnodes(n, args, fault), "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", endpoint, "--rdzv_id", f"nl{trial}", "--max_restarts", "3",
                    "--monitor_interval", "0.1", os.path.join(HERE, "recsys_reference.py"), ratings, "--epochs",
                    "100", "-b", "256", "--checkpoint-dir", f"{tmp}/ckpt", "--checkpoint-every",
                    str(args.buddy_every), "--print-steps"]
            return Node(cluster, i, argv, dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="INFO"))

        def step_of(line):
            m = REF_STEP.search(line)
            return int(m.group(1)) if m else None

        nodes = [start(i) for i in range(n)]
        spare = None
        try:
            printer = find_printer(nodes, REF_STEP)
            victim = 0 if fault == "master" else rng.randrange(1, n)
            if printer.wait_until(lambda l: s if (s := step_of(l)) is not None and s >= args.buddy_every else None,
                                  120) is None:
                raise SystemExit("no checkpoint was written:\n" + printer.text()[-3000:])
            if not args.shrink and fault != "master":
                spare = start(n)
                # The spare's agent says it joined (LOGLEVEL=INFO) and waits for the next round.
                if not spare.wait_for(re.compile(r"rendezvous", re.I), 120):
                    raise SystemExit("the spare did not join:\n" + spare.text()[-3000:])
            reached, fault_ms = fault_at_random_step(args, cluster, printer, step_of, fault, victim, rng)
            if second is not None:
                time.sleep(max(0.0, fault_ms / 1000 + args.second_after - time.time()))  # the fault's own timing
                cluster.link(second, False)
            if fault == "master":
                nodes[0] = restart_master(args, fault_ms, start)
            # The new round's rank 0 says where it starts, then prints its first step.
            deadline = time.time() + args.recovery_timeout
            result = None
            while result is None and time.time() < deadline:
                for node in nodes + ([spare] if spare else []):
                    with node.cond:
                        lines = [(t, l) for t, l in node.lines if l and t * 1000 > fault_ms]
                    started = next((int(m.group(1)) for _, l in lines if (m := REF_START.search(l))), None)
                    if started is None:
                        continue
                    after = [t for t, l in lines[next(k for k, (_, l) in enumerate(lines) if REF_START.search(l)):]
                             if REF_STEP.search(l)]
                    if after:
                        result = {"fault_to_stepping_s": round(after[0] - fault_ms / 1000, 2),
                                  "lost_steps": reached - started, "sources": ["disk (shared)"]}
                        break
                if result is None:
                    time.sleep(0.2)
            if result is None:
                result = {"fault_to_stepping_s": None, "lost_steps": None,
                          "sources": [f"none within {args.recovery_timeout:.0f} s"]}
            if args.keep_logs and (args.keep_all or result["fault_to_stepping_s"] is None):
                os.makedirs(args.keep_logs, exist_ok=True)
                for i, node in enumerate(nodes + ([spare] if spare else [])):
                    with open(f"{args.keep_logs}/torchrun_{fault}{trial}_host{i}.txt", "w") as f:
                        with node.cond:
                            f.writelines(f"{t - fault_ms / 1000:+8.3f} {l}" for t, l in node.lines if l)
            return result
        finally:
            if fault in ("cut", "cut2"):
                cluster.link(victim, True)
            if second is not None:
                cluster.link(second, True)
            for i in range(n + 1):
                cluster.kill_all(i, wait=True)


def one_trial(args, cluster, ratings, fault, trial, rng):
    n = args.nodes
    with tempfile.TemporaryDirectory() as tmp:
        endpoint = f"{cluster.addrs[0]}:{PORT}"

        spares_needed = args.rack_size if fault == "rack" else 1
        events = {i: f"{tmp}/events{i}.jsonl" for i in range(n + spares_needed)}

        def start(i):
            argv = [os.path.join(args.build_dir, "bin", "dtrun"), "--nnodes", nnodes(n, args, fault), "--nproc-per-node", "2",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", f"nl{trial}",
                    "--local-addr", cluster.addrs[i], "--rdzv-token", "tok",
                    "--rdzv-conf", keep_alive_conf(args.keep_alive),
                    "--max-restarts", "3", "--event-log", events[i], "--heartbeat-timeout",
                    str(args.heartbeat_timeout), "--snapshot-buddy-every", str(args.buddy_every),
                    "--warm-workers", args.warm_workers,
                    os.path.join(args.build_dir, "bin", "train_recsys"), ratings, "--epochs", "100", "-b", "256",
                    "-p", "1", "--save-every-minutes", "1000", "--no-tensorboard", "--output-dir", f"{tmp}/out{i}"]
            if fault == "rack":
                where = argv.index("--nproc-per-node")
                if i < n:
                    argv[where:where] = ["--node-rank", str(i)]  # racks of consecutive node ranks
                if args.domains == "on":
                    argv[where:where] = ["--failure-domain", f"rack{i // args.rack_size}" if i < n else "spares"]
            return Node(cluster, i, argv, dict(os.environ, OMP_NUM_THREADS="1", DTRUN_SNAPSHOT_PEERS=args.peers))

        nodes = [start(i) for i in range(n)]
        spare = None
        spares = []
        second = None
        also = None  # master2: the host killed with the rendezvous host
        try:
            # Rank 0 prints the steps; which host has it depends on the order the hosts joined.
            printer = find_printer(nodes, STEP)
            if fault == "cut2":
                victim, second = victim_and_its_buddy(cluster, nodes, rng)
            elif fault == "rack":
                first = args.rack_size * rng.randrange(1, n // args.rack_size)  # not the rendezvous host's
                victim = list(range(first, first + args.rack_size))
            else:
                victim = 0 if fault.startswith("master") else rng.randrange(1, n)
            if fault == "master2":
                also = rng.randrange(1, n)
            for host in victim if fault == "rack" else [victim]:
                if not nodes[host].wait_for(re.compile(r"holds a copy of its snapshot of step"), 120):
                    raise SystemExit(f"host {host} never placed a buddy copy:\n" + nodes[host].text()[-3000:])
            if not args.shrink and (fault != "master" or args.master_spare):
                for i in range(n, n + spares_needed):
                    spares.append(start(i))
                    if not spares[-1].wait_for(re.compile(r"spare"), 120):
                        raise SystemExit("the spare did not join:\n" + spares[-1].text()[-3000:])
                spare = spares[0]
            def step_of(line):
                m = STEP.search(line)
                return global_step(m) if m else None
            reached, fault_ms = fault_at_random_step(args, cluster, printer, step_of, fault, victim, rng, also)
            if second is not None:
                time.sleep(max(0.0, fault_ms / 1000 + args.second_after - time.time()))  # the fault's own timing
                cluster.link(second, False)
            if fault.startswith("master"):
                nodes[0] = restart_master(args, fault_ms, start)
            # Every node that runs the next round logs `recovered` once its ranks step again; a
            # restarted master's node starts afresh (nothing to recover), and steps with the others.
            lost = victim if fault == "rack" else [] if fault == "freeze" else [victim]
            runners = [i for i in range(n) if i not in lost and i != second] + \
                (list(range(n, n + len(spares))) if fault != "freeze" else [])
            logs = {i: events[i] for i in runners}
            wanted = len(runners)
            if fault == "master" and spares:
                # Host 0 starts afresh and records nothing: the other places of the new round go to
                # the survivors or (it should not be) the spare, whichever record a recovery.
                logs = {i: events[i] for i in range(1, n + len(spares))}
                wanted = n - 1
            if fault == "master2":
                # Host 0 starts afresh and records nothing; the survivors and the spare, in the place
                # of the host killed with it, do.
                logs = {i: events[i] for i in range(1, n + len(spares)) if i != also}
                wanted = n - 1
            deadline = time.time() + 180
            records = {}
            gave_up = None  # a survivor that stopped: the restarted service did not answer within its lease
            while time.time() < deadline and len(records) < wanted and gave_up is None:
                for i, path in logs.items():
                    if i in records or not os.path.exists(path):
                        continue
                    for line in open(path):
                        if '"recovered"' in line:
                            records[i] = json.loads(line)
                            break
                if fault.startswith("master"):
                    gave_up = next((i for i in range(1, n) if "lost the rendezvous service" in nodes[i].text()), None)
                time.sleep(0.2)
            if gave_up is not None:
                if args.keep_logs:
                    keep_logs(args.keep_logs, f"{fault}{trial}", nodes + spares, events, fault_ms)
                return {"fault_to_stepping_s": None, "survivor_gave_up": gave_up, "sources": []}
            if len(records) < wanted:
                missing = [i for i in logs if i not in records]
                host = min(missing)  # a survivor before a spare, which may rightly wait
                text = spares[host - n].text() if host >= n else nodes[host].text()
                if args.keep_logs:
                    keep_logs(args.keep_logs, f"{fault}{trial}", nodes + spares, events, fault_ms)
                raise SystemExit(f"{fault}: host {host} recorded no recovery:\n{text[-4000:]}")
            if args.keep_logs and (args.keep_all or any(r.get("source") == "none" for r in records.values())):
                keep_logs(args.keep_logs, f"{fault}{trial}", nodes + spares, events, fault_ms)
            last_ms = max(r["ts_ms"] for r in records.values())
            restored = min(max(r.get("restored_step", 0), 0) for r in records.values())
            # Workers of the recovery round that were released warm rather than spawned.
            warm = 0
            for path in logs.values():
                starts = [json.loads(l) for l in open(path) if '"worker_start"' in l]
                last = max((r["round"] for r in starts), default=-1)
                warm += sum(1 for r in starts if r["round"] == last and r.get("warm"))
            # The phases of the node that came back last, from the fault: noticed, workers stopped,
            # started, state restored, stepping.
            last = max(records.values(), key=lambda r: r["ts_ms"])
            noticed = last["ts_ms"] - last["stepping_ms"] - fault_ms
            phases = [round((noticed + last.get(k, 0)) / 1000, 2) for k in ("stopped_ms", "started_ms", "restored_ms", "stepping_ms")]
            return {"fault_to_stepping_s": (last_ms - fault_ms) / 1000, "warm_workers": warm,
                    "last_node_phases_s": [round(noticed / 1000, 2)] + phases,
                    "lost_steps": reached - restored,
                    "sources": sorted({r.get("source", "?") for r in records.values()}),
                    **({"spare_took_a_place": any(i >= n for i in records)} if fault.startswith("master") and spares else {})}
        finally:
            if fault in ("cut", "cut2"):
                cluster.link(victim, True)
            if fault == "rack":
                for host in victim:
                    cluster.link(host, True)
            if second is not None:
                cluster.link(second, True)
            for i in range(n + spares_needed):
                cluster.kill_all(i, wait=True)


def keep_logs(directory, name, nodes, events, fault_ms):
    """What every host said, each line with its arrival time in seconds from the fault, and its events."""
    os.makedirs(directory, exist_ok=True)
    for i, node in enumerate(nodes):
        with open(f"{directory}/{name}_host{i}.txt", "w") as f:
            with node.cond:
                f.writelines(f"{t - fault_ms / 1000:+8.3f} {l}" for t, l in node.lines if l)
        if os.path.exists(events[i]):
            with open(events[i]) as src, open(f"{directory}/{name}_events{i}.jsonl", "w") as dst:
                for line in src:
                    r = json.loads(line)
                    r["t_from_fault_s"] = round(r["ts_ms"] / 1000 - fault_ms / 1000, 3)
                    dst.write(json.dumps(r) + "\n")


def nnodes(n, args, fault):
    """--nnodes: N:N with a spare waiting, N-1:N when the job goes on without a lost node (two lost:
    the survivors and the spare)."""
    return f"{n - 1}:{n}" if args.shrink or fault == "cut2" else f"{n}:{n}"


BUDDY = re.compile(r"the buddy (\S+):\d+ holds a copy of its snapshot")


def victim_and_its_buddy(cluster, nodes, rng):
    """cut2: a host and the host keeping its buddy copies, neither of them the rendezvous host."""
    pairs = []
    for i in range(1, len(nodes)):
        addr = nodes[i].wait_until(lambda l: m.group(1) if (m := BUDDY.search(l)) else None, 120)
        if addr is None:
            raise SystemExit(f"host {i} never placed a buddy copy:\n" + nodes[i].text()[-3000:])
        buddy = cluster.addrs.index(addr)
        if buddy != 0:
            pairs.append((i, buddy))
    if not pairs:
        raise SystemExit("cut2: every host's buddy is the rendezvous host")
    return rng.choice(pairs)


def torch_version():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip() or "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build_dir")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--faults", default="kill,cut,freeze")
    ap.add_argument("--buddy-every", type=int, default=10)
    ap.add_argument("--heartbeat-timeout", type=float, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warm-workers", default="on", help="dtrun's --warm-workers (on: the default)")
    ap.add_argument("--launcher", default="dtrun", choices=["dtrun", "torchrun"])
    ap.add_argument("--recovery-timeout", type=float, default=180,
                    help="seconds after the fault to wait for stepping (torchrun: then counted as not recovered)")
    ap.add_argument("--keep-logs", help="write every host's output here for trials that restored nothing")
    ap.add_argument("--keep-all", action="store_true", help="with --keep-logs: for every trial")
    ap.add_argument("--shrink", action="store_true", help="no spare: the job goes on with one node fewer")
    ap.add_argument("--master-spare", action="store_true", help="master: a spare waits too")
    ap.add_argument("--peers", default="on", choices=["on", "off"], help="dtrun's DTRUN_SNAPSHOT_PEERS")
    ap.add_argument("--restart-after", type=float, default=1.0,
                    help="master fault: seconds from the kill to the supervisor's restart of host 0's launcher")
    ap.add_argument("--keep-alive", type=float, default=KEEP_ALIVE_INTERVAL,
                    help="dtrun's keep-alive interval in seconds (its default: 5)")
    ap.add_argument("--second-after", type=float, default=0.5,
                    help="cut2: seconds from the first host's cut to its buddy's")
    ap.add_argument("--fault-after", type=int, default=0,
                    help="the fault comes at a random step after this one (0: soon after the first buddy copy)")
    ap.add_argument("--rack-size", type=int, default=2, help="rack: hosts per rack (consecutive node ranks)")
    ap.add_argument("--domains", default="on", choices=["on", "off"],
                    help="rack: whether each node names its rack with --failure-domain")
    args = ap.parse_args()
    if args.launcher == "torchrun" and "cut2" in args.faults.split(","):
        raise SystemExit("cut2 is for dtrun: torchrun keeps no buddy copies")
    if args.launcher == "torchrun" and "master2" in args.faults.split(","):
        raise SystemExit("master2 is for dtrun: torchrun does not survive its rendezvous host's loss (--faults master)")
    if args.shrink and "master2" in args.faults.split(","):
        raise SystemExit("master2 needs the spare: leave out --shrink")
    if args.shrink and "freeze" in args.faults.split(","):
        raise SystemExit("--shrink: a frozen worker's node stays in the job; use --faults kill,cut")
    if os.geteuid() != 0:
        raise SystemExit("node_loss.py needs root (network namespaces)")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    job = "torchrun + recsys_reference.py" if args.launcher == "torchrun" else "dtrun + train_recsys"
    if args.launcher == "torchrun":
        setup = (f"torch {torch_version()}'s rendezvous defaults (keep-alive 5 s, 3 misses); a checkpoint every "
                 f"{args.buddy_every} steps on shared storage; recovery awaited {args.recovery_timeout:.0f} s")
    else:
        setup = (f"--rdzv-conf {keep_alive_conf(args.keep_alive)}; heartbeat timeout {args.heartbeat_timeout} s; "
                 f"buddy every {args.buddy_every} steps; --warm-workers {args.warm_workers}; DTRUN_SNAPSHOT_PEERS={args.peers}")
    layout = f"elastic {args.nodes - 1}:{args.nodes}, no spare" if args.shrink else \
        "+ 1 spare" + (" (none for master)" if "master" in args.faults.split(",") and not args.master_spare else "")
    if "rack" in args.faults.split(","):
        layout += (f"; rack: racks of {args.rack_size} consecutive node ranks, {args.rack_size} spares, "
                   f"--failure-domain {'per rack' if args.domains == 'on' else 'not given'}")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; {args.nodes} nodes x 2 workers {layout}, {job}; {setup}")
    rng = random.Random(args.seed)
    if "rack" in args.faults.split(",") and (args.nodes % args.rack_size or args.nodes < 2 * args.rack_size):
        raise SystemExit("rack: --nodes must be two or more racks of --rack-size hosts")
    cluster = Cluster(args.nodes + (args.rack_size if "rack" in args.faults.split(",") else 1))
    try:
        with tempfile.TemporaryDirectory() as data:
            ratings = make_ratings(args.build_dir, data)
            trial = 0
            for fault in args.faults.split(","):
                rows = []
                for _ in range(args.trials):
                    trial += 1
                    run = one_trial_torchrun if args.launcher == "torchrun" else one_trial
                    rows.append(run(args, cluster, ratings, fault, trial, rng))
                    print(f"  {fault} #{len(rows)}: {rows[-1]}", file=sys.stderr, flush=True)
                done = [r for r in rows if r["fault_to_stepping_s"] is not None]
                sources = sorted(set(s for r in rows for s in r["sources"]))
                if not done:
                    print(f"{fault}: no trial recovered; sources {sources}", flush=True)
                    continue
                t = [r["fault_to_stepping_s"] for r in done]
                lost = [r["lost_steps"] for r in done]
                warm = [r["warm_workers"] for r in done if "warm_workers" in r]
                print(f"{fault}: {len(done)} of {len(rows)} recovered; fault -> every rank stepping median "
                      f"{statistics.median(t):.2f} s, max {max(t):.2f} s; lost steps median {statistics.median(lost)}, "
                      f"max {max(lost)}; sources {sources}" +
                      (f"; workers released warm per recovery median {statistics.median(warm)}" if warm else ""),
                      flush=True)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()

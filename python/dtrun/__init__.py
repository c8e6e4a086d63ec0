"""A Python worker's side of dtrun: progress reports, and training state kept in memory.

    import dtrun

    dtrun.total_steps(epochs * len(loader))        # optional: rates and an ETA
    for step, batch in enumerate(loader):
        with dtrun.section("step"):
            train_step(batch)
        dtrun.heartbeat(step, samples=(step + 1) * batch_size)
    with dtrun.section("checkpoint"):
        torch.save(state, path)

With `--heartbeat-timeout` and `--section-timeout NAME=SECONDS`, dtrun declares a rank hung when
its reports stop, collects every rank's stacks (this module lets faulthandler write them when the
agent asks) and restarts the job. Outside dtrun every call does nothing. Reports never block:
one the agent cannot take at once is dropped. The protocol is in dtrun's docs/DESIGN.md.

Recovery from memory: a crashed rank's job resumes from the newest step every rank holds in its
agent's memory instead of from the last file on disk. The ranks that survive a failure keep the
state of their last dtrun.snapshot() call on their way out, so no step is lost (dtrun/_on_failure.py).

    dist.init_process_group(...)
    restored = dtrun.restore(map_location=device)   # None: start fresh or load your checkpoint
    if restored:
        model.load_state_dict(restored.state["model"])
        optimizer.load_state_dict(restored.state["optimizer"])
        start = restored.step
    for step in range(start, steps):
        train_step()
        dtrun.snapshot({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step + 1)

An epoch resumed mid-way: dtrun.ResumableSampler(sampler).start_at(batch, batch_size) skips the
batches it already trained without loading them (dtrun/_sampler.py); Restored.resume_batch says
which batch that is after the world size changed.

Stragglers: dtrun.watch_ddp(ddp_model) after wrapping the model (before the first backward) reports
each rank's wait inside the gradient all-reduce; dtrun names the rank that keeps the others waiting
(`dtrun status`, the event log, the metrics). It replaces DDP's default communication hook with one
that does the same averaging.

Silent corruption: dtrun.check_replicas(model, optimizer) every few steps (before dtrun.snapshot)
compares a fingerprint of every rank's parameters and optimizer state, names a rank that differs
from the others and raises ReplicaMismatch, so that the restart resumes from agreed state.

Launching from Python: dtrun.elastic_launch(dtrun.LaunchConfig(...), fn)(*args) mirrors
torch.distributed.launcher.api (dtrun/_launch.py).

Warm restarts: call dtrun.await_round() after the imports (torch, your model code) and before
reading RANK and the rest; dtrun then keeps the next attempt's processes started and parked there.
"""

import contextlib
import faulthandler
import os
import re
import signal
import socket
import sys
import time

__all__ = ["enabled", "heartbeat", "section", "begin", "end", "total_steps", "snapshot", "restore", "await_round",
           "watch_ddp", "check_replicas", "ReplicaMismatch", "LaunchConfig", "elastic_launch", "launch_agent",
           "ChildFailedError", "patch_torchrun", "ResumableSampler"]

_LAUNCH_API = ("LaunchConfig", "elastic_launch", "launch_agent", "ChildFailedError", "patch_torchrun")


def __getattr__(name):
    # The launch API (dtrun/_launch.py) loads on first use: workers never pay for it.
    if name in _LAUNCH_API:
        from dtrun import _launch

        return getattr(_launch, name)
    if name == "ResumableSampler":
        from dtrun import _sampler

        return _sampler.ResumableSampler
    raise AttributeError("module 'dtrun' has no attribute %r" % name)

_PATH = ""
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")
_sock = None
_stacks_file = None  # kept open: faulthandler writes to its fd from a signal handler
_parks = False  # await_round() was called: the agent may park this program's successors
_beats = False  # the script called heartbeat(): snapshot() then leaves the step reports to it


def enabled():
    """True when running under dtrun (reports go somewhere)."""
    return _sock is not None


def _send(text):
    if _sock is None:
        return
    try:
        _sock.sendto(text.encode("ascii"), _PATH)
    except OSError:
        pass  # the agent is busy or gone: a report is never worth blocking training


def watch_ddp(model, process_group=None):
    """Reports this rank's wait inside each step's gradient all-reduce of the DDP `model` (a
    DistributedDataParallel), so that dtrun can name a straggler. Returns `model`. Outside dtrun
    the model is left as it is."""
    if _sock is None:
        return model
    from dtrun import _ddp_watch
    return _ddp_watch.watch(model, _send, process_group)


def _count(value, what):
    value = int(value)
    if value < 0:
        raise ValueError("dtrun: %s must be >= 0, got %d" % (what, value))
    return value


def heartbeat(step=None, samples=None):
    """Says the worker is alive; `step` and `samples` (totals so far) give rates and progress.

    A script that calls dtrun.snapshot(state, step) every step needs no heartbeat: snapshot()
    reports its step as one until the script sends its own."""
    global _beats
    if _sock is None:
        return
    _beats = True
    fields = ["beat"]
    if step is not None:
        fields.append("step=%d" % _count(step, "step"))
    if samples is not None:
        fields.append("samples=%d" % _count(samples, "samples"))
    _send(" ".join(fields))


def _checked(name):
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("dtrun: a section name is 1-64 of A-Z a-z 0-9 _ . : - (got %r)" % (name,))
    return name


def begin(name):
    """A named section starts (see section())."""
    name = _checked(name)
    _send("begin name=" + name)


def end(name):
    """The innermost open section called `name` ends."""
    name = _checked(name)
    _send("end name=" + name)


@contextlib.contextmanager
def section(name):
    """`with section("checkpoint"):` -- --section-timeout checkpoint=SECONDS bounds it."""
    begin(name)
    try:
        yield
    finally:
        end(name)


def total_steps(steps):
    """How many steps the job will run, for rates and an ETA."""
    _send("total steps=%d" % _count(steps, "steps"))


_snap = None  # the dtrun._snapshots module, imported at the first snapshot or restore
_region = None
_replica = None  # the region of buddy copies (multi-node jobs)
_cadence = None
_keeper = None  # dtrun._on_failure.OnFailure: snapshots on failure, made at the first snapshot


def _snapshot_region():
    """The agent's region for this rank (None outside dtrun or with --snapshot-memory 0)."""
    global _snap, _region, _replica, _cadence
    if _snap is None:
        import importlib
        _snap = importlib.import_module("dtrun._snapshots")
        _region = _snap.region_from_environment()
        _replica = _snap.region_from_environment("DTRUN_SNAPSHOT_REPLICA_FD")
        forced = os.environ.get("DTRUN_SNAPSHOT_EVERY", "0")
        _cadence = _snap.Cadence(int(forced) if forced.isdigit() else 0)
    return _region


def _process_group():
    """torch.distributed's default group when more than one rank must agree, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("dtrun.snapshot/restore: call them after torch.distributed.init_process_group: "
                           "the ranks agree on which steps they hold")
    return dist


def _group_device(dist):
    """Where the group's collectives take their tensors."""
    import torch
    # A group with Gloo in it ("gloo", or PyTorch 2's default "cpu:gloo,cuda:nccl") takes CPU
    # tensors; an NCCL-only group needs them on this rank's device.
    gloo = "gloo" in str(dist.get_backend())
    return "cpu" if gloo or not torch.cuda.is_available() else torch.device("cuda", torch.cuda.current_device())


class ReplicaMismatch(RuntimeError):
    """Raised by check_replicas on every rank when the replicas' states differ."""


_checks = 0


def check_replicas(model, optimizer=None, step=None):
    """Checks that every DDP rank holds the same parameters (and `optimizer`'s state): call it on
    every rank at the same point, after an optimizer step, before dtrun.snapshot. Nothing happens
    when they agree. When they do not, the ranks that differ from the majority are named on stderr
    and to dtrun (the event log's `replica_mismatch`) and ReplicaMismatch is raised on every rank:
    left uncaught, the restart resumes from the newest snapshot, taken while they agreed."""
    global _checks
    _checks += 1
    dist = _process_group()
    if dist is None:
        return
    from dtrun import _replicas, _snapshots
    hash_at = _snapshots._hash_at if _snapshots._xxh is not None else None  # else blake2b: slower, same verdict
    try:
        _replicas.check(dist, _group_device(dist), model, optimizer, _checks if step is None else int(step), hash_at,
                        _send)
    except _replicas.ReplicaMismatch as e:
        raise ReplicaMismatch(str(e)) from None


def _agreed_max(value):
    """The largest `value` over the ranks (a one-element all-reduce on the group's device)."""
    dist = _process_group()
    if dist is None:
        return value
    import torch
    t = torch.tensor([value], dtype=torch.int64, device=_group_device(dist))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _completed_ms(where, slot):
    """When the snapshot in `slot` was completed (Unix ms); 0 if its header cannot be read now (an
    agent's buddy copy arriving in the replica region): every rank must reach the gather below."""
    try:
        return int(where.header(slot).unix_ms)
    except Exception:
        return 0


def _choose_step(held):
    """(step, source, receivers) from every rank's held snapshots (_snapshots.choose), the same on every
    rank. `held`: step -> (region, slot)."""
    mine = sorted(((step, _completed_ms(where, slot)) for step, (where, slot) in held.items()), reverse=True)
    steps, completed = [s for s, _ in mine], [ms for _, ms in mine]
    dist = _process_group()
    if dist is None:
        return _snap.choose([steps], False)[:3]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (steps, completed))
    step, source, receivers, completed_last = _snap.choose([g[0] for g in gathered], _snap.peers_allowed(),
                                                           [g[1] for g in gathered])
    if completed_last and dist.get_rank() == 0:
        print("no in-memory snapshot step is held by half the ranks that hold one (as each node's --snapshot-dir "
              "copies of a job killed everywhere at once are); taking step %d, the snapshot completed last" % step,
              file=sys.stderr, flush=True)
    return step, source, receivers


def _receive_peer_copy(step, source, receivers, held, region, map_location, load_kwargs):
    """The step's state sent by `source` to `receivers` (a rank holding it returns None): its size and
    checksum first, checked against the receiver's slot before anything is allocated, then, if every
    rank can go on, the bytes. Every rank calls it; (state, ok)."""
    import torch
    dist = _process_group()
    device = _group_device(dist)
    rank = dist.get_rank()
    header = torch.tensor([-1, 0], dtype=torch.int64)
    outgoing = None
    if rank == source:
        try:
            where, slot = held[step]
            h = where.header(slot)
            outgoing = torch.frombuffer(where.payload(slot)[:h.payload_bytes], dtype=torch.uint8)
            header = torch.tensor([h.payload_bytes, h.payload_hash - (1 << 64) * (h.payload_hash >> 63)],
                                  dtype=torch.int64)
        except Exception as e:  # said here; the receivers see size -1
            _snap._warn("cannot send the in-memory snapshot of step %d to the ranks without it: %s" % (step, e))
    header = header.to(device)
    if rank == source:
        for r in receivers:
            dist.send(header, r)
    elif rank in receivers:
        dist.recv(header, source)
    size, expected = int(header[0]), int(header[1]) & ((1 << 64) - 1)
    problem = None
    if rank in receivers:
        problem = _snap.peer_size_problem(size, region.capacity if region is not None else None, source)
    if _agreed_max(1 if problem else 0):
        if problem:
            _snap._warn("cannot take rank %d's in-memory snapshot of step %d: %s" % (source, step, problem))
        return None, False
    if rank == source:
        outgoing = outgoing.to(device)
        for r in receivers:
            dist.send(outgoing, r)
    if rank not in receivers:
        return None, True
    data = torch.empty(size, dtype=torch.uint8, device=device)
    dist.recv(data, source)
    received = memoryview(data.cpu().numpy())
    stream = _snap.peer_payload(received, expected, step, source)
    state = torch.load(stream, map_location=map_location, **load_kwargs)
    try:  # held here too, as the peers hold it; the restore stands without it
        region.adopt(step, received, expected)
    except Exception as e:
        _snap._warn("rank %d's copy of step %d restored but not held in memory here: %s" % (source, step, e))
    return state, True


def _under_dtrun():
    # Not whether this rank has a region: one rank without must still take the collectives the
    # others take, or they would wait for it forever.
    return "DTRUN_LAUNCH_ID" in os.environ


def snapshot(state, step):
    """Keeps `state` (anything torch.save takes, e.g. a dict of state_dicts) as of `step` in dtrun's memory.

    Call it after every step with the steps done so far; it writes when its measured cost fits
    2% of the step time (or every N-th step with dtrun --snapshot-every N) and returns whether
    it did. Until the script calls dtrun.heartbeat() itself, `step` is also reported as its
    progress. Every rank must call it with the same steps. Outside dtrun it does nothing.

    In between, the state (in host memory or on a GPU) is kept on the way out: when another rank fails, this
    rank writes the `state` of its last call as it leaves (an exception, or dtrun's SIGTERM while
    blocked in a collective), so the restart loses no step; the periodic snapshots then take at
    most 0.25% of the step time. It needs the state's parameters to change only in a torch.optim
    optimizer's step (dtrun._on_failure; DTRUN_SNAPSHOT_ON_FAILURE=off turns it off).
    """
    step = _count(step, "step")
    if not _under_dtrun():
        return False
    if not _beats:
        # The step as progress: `dtrun status`, rates, hang detection, and a recovery's steps lost
        # and its "stepping again" for scripts that send no heartbeat (the common case).
        _send("beat step=%d" % step)
    region = _snapshot_region()
    on_failure = _on_failure_for(region)
    if on_failure is None or on_failure.off:
        return _snapshot_if_due(region, state, step)
    on_failure.moving()
    wrote = False
    try:
        wrote = _snapshot_if_due(region, state, step)
    finally:  # also when a collective here failed: this state is the one to keep
        on_failure.arm(state, step, held=wrote)
        kept_anyway = on_failure.armed_once and not on_failure.off
        _cadence.budget = _snap.COST_BUDGET_WITH_RESCUE if kept_anyway else _snap.COST_BUDGET
    return wrote


def _on_failure_for(region):
    """The snapshots on failure of this worker (dtrun._on_failure), None without a region or when off."""
    global _keeper
    if _keeper is None and region is not None and os.environ.get("DTRUN_SNAPSHOT_ON_FAILURE", "on") != "off":
        from dtrun import _on_failure
        _keeper = _on_failure.OnFailure(region, _send,
                                        lambda e: isinstance(e, ReplicaMismatch))
    return _keeper


def _snapshot_if_due(region, state, step):
    cadence = _cadence
    if not cadence.due(step):
        cadence.step_seconds(step, time.monotonic())
        return False
    took, wrote = 0.0, False
    if region is not None:
        start = time.monotonic()
        try:
            nbytes = region.write(state, step)
            took, wrote = time.monotonic() - start, True
            _send("snapshot step=%d bytes=%d us=%d" % (step, nbytes, int(took * 1e6)))
        except _snap.SnapshotError as e:
            _snap._warn("snapshot of step %d not taken: %s" % (step, e))
    cadence.taken_at(step, took)
    step_s = cadence.step_seconds(step, time.monotonic())
    if cadence.forced_every == 0:
        # Every rank is here at the same step, so they leave with the same interval. A rank that
        # cannot write asks for the longest: no restore can use a step it lacks.
        wanted = cadence.wanted_after(took, step_s) if wrote else _snap.MAX_EVERY
        cadence.every = _agreed_max(wanted)
    return wrote


def restore(map_location=None, **load_kwargs):
    """The newest state every rank holds in dtrun's memory, as Restored(state, step), or None.

    Call it once at start, after init_process_group, on every rank. The ranks agree on the newest
    step all of them hold with a good checksum, or that at least half of those holding any hold
    (a rank without it, such as one whose node was lost, receives the lowest holder's copy: DDP
    ranks hold the same state; DTRUN_SNAPSHOT_PEERS=off when yours do not), each reads its copy
    (torch.load with `map_location` and `load_kwargs`), and if any rank fails every rank gets
    None: load your disk checkpoint then. Outside dtrun it returns None.

    After the world size changed (an elastic job that lost or gained nodes, a run given another
    --nproc-per-node) the state the old world took is restored, as rank 0's checkpoint would be;
    `Restored.world_size` says how many ranks took it, and `Restored.resume_batch` where a
    DistributedSampler epoch goes on in the new world.
    """
    if not _under_dtrun():
        return None
    region = _snapshot_region()
    regions = [r for r in (region, _replica) if r is not None]
    held = {}  # step -> (region, slot); the worker's own region first
    own = False  # the worker's own region holds some snapshot of this rank
    for r in reversed(regions):
        usable = r.usable()
        own = own or (r is region and bool(usable))
        held.update({s: (r, slot) for s, slot in usable.items()})
    step, source, receivers = _choose_step(held)  # the same on every rank
    dist = _process_group()
    receiving = dist is not None and dist.get_rank() in receivers
    state, ok = None, step is not None
    if ok and source is not None:
        if receiving:
            print("rank %d holds no in-memory snapshot of step %d; receiving rank %d's copy" % (dist.get_rank(), step, source),
                  file=sys.stderr, flush=True)
        try:
            state, ok = _receive_peer_copy(step, source, receivers, held, region, map_location, load_kwargs)
        except Exception as e:  # after every transfer: a bad copy, or torch.load refusing it
            _snap._warn("in-memory snapshot of step %d from rank %d unusable: %s" % (step, source, e))
            ok = False
    if ok and not receiving:
        where, slot = held[step]
        try:
            state = where.load(slot, where.header(slot), map_location, load_kwargs)
        except Exception as e:  # any failure to read our own copy means: every rank uses the disk
            _snap._warn("in-memory snapshot of step %d unreadable: %s" % (step, e))
            ok = False
    if step is not None:
        ok = _agreed_max(0 if ok else 1) == 0
    world = None
    if ok:  # the world the state was taken in, the same on every rank (receivers learn it from holders)
        where, slot = held[step] if not receiving else (None, None)
        world = _agreed_max(where.header(slot).world_size if where is not None else -1)
    for r in regions:
        r.discard_all_but(step if ok else -1)
    if not ok:
        return None
    _cadence.restart_from(step)
    now = dist.get_world_size() if dist is not None else 1
    if world != now and (dist is None or dist.get_rank() == 0):
        print("dtrun: resuming from the in-memory snapshot of step %d, taken by a world of %d ranks (now %d)"
              % (step, world, now), file=sys.stderr, flush=True)
    # A copy fetched from the buddy: this node held none of this rank's own.
    from_buddy = not receiving and held[step][0] is _replica and not own
    _send("restored source=%s step=%d" % ("peer" if receiving else "buddy" if from_buddy else "memory", step))
    return _snap.Restored(state, step, world)


def _register_stacks():
    """Lets the agent ask for this process's Python stacks (every thread) without stopping it."""
    global _stacks_file
    path = os.environ.get("DTRUN_STACKS_FILE", "")
    rtmin = getattr(signal, "SIGRTMIN", None)
    if not path or rtmin is None:
        return 0
    signum = rtmin + 6
    if signal.getsignal(signum) != signal.SIG_DFL:
        return 0  # somebody else's signal
    try:
        _stacks_file = open(path, "a")
        faulthandler.register(signum, file=_stacks_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        return 0
    return int(signum)


def _hello():
    _send("hello lang=python" + (" stack_signal=%d" % _stack_signal if _stack_signal else "") +
          (" warm=1" if _parks else ""))


def _connect():
    """Reports go to this round's agent socket (the environment is the round's by now)."""
    global _PATH, _sock, _stack_signal
    _PATH = os.environ.get("DTRUN_PROGRESS_SOCKET", "")
    _sock = None
    if _PATH:
        try:
            _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            _sock.setblocking(False)
        except OSError:
            _sock = None
    if _sock is not None:
        _stack_signal = _register_stacks()
        _hello()


def await_round():
    """Lets dtrun start this program ahead of a restart and park it here, warm.

    Call it once, after the expensive imports (torch, your model code) and before anything reads
    the round's environment (RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_RESTART_COUNT, ...).
    Started normally it returns at once and tells dtrun the program may be parked; started parked
    it blocks until a restart releases it, then replaces os.environ with that round's. With
    dtrun --max-restarts N, a crash then costs no interpreter start and no `import torch`.
    dtrun parks successors once every rank has trained: reported a step (heartbeat) or written a
    snapshot (dtrun.snapshot). Outside dtrun it does nothing.
    """
    global _parks
    first, _parks = not _parks, True
    text = os.environ.get("DTRUN_PARK_FD")
    if text is None:
        if first and _sock is not None:
            _hello()  # again, now with warm=1
        return
    from dtrun import _warm
    try:
        fd = int(text)
        env = _warm.read_release(fd)
    except (ValueError, OSError, _warm.ReleaseError) as e:
        # The agent is gone or the message is broken: this process belongs to no round.
        os.write(2, ("dtrun.await_round: %s; this parked worker exits\n" % e).encode())
        os._exit(1)
    os.close(fd)
    _warm.mark_released()
    os.environ.clear()
    os.environ.update(env)
    _connect()


_stack_signal = 0
if "DTRUN_PARK_FD" not in os.environ:  # a parked worker connects once released (await_round)
    _connect()

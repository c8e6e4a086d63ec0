"""dtrun.snapshot() and dtrun.restore(): a Python script's training state in its agent's memory.

The agent holds one memory region per local rank (docs/DESIGN.md, "Snapshots") and hands it to
every worker of that rank in turn, so a snapshot outlives the worker that wrote it. This module
writes the region in the format the C++ worker library uses (two slots, each a 4 KiB header then
the payload; the header written last, its magic last of all; XXH3-64 checksums of payload and
header), with a payload of its own: b"DTPYPKL1" and the state as torch.save writes it. Neither
reader takes the other's payload.

torch is imported only when a snapshot is taken or restored: `import dtrun` stays cheap.
"""

import collections
import contextlib
import ctypes
import fcntl
import io
import math
import mmap
import os
import stat
import struct
import time

from dtrun import _sampler

KIB4 = 4096
SLOTS = 2
_MAGIC = b"DTSNAP01"
_VERSION = 1
# magic, version, wire bytes, job, rank, world, step, attempt, payload bytes, payload hash,
# unix ms, header hash: the C++ struct `Wire` in snapshot/snapshot_region.cc.
_WIRE = struct.Struct("<8sIIQqqqqQQqQ")
_HASHED = slice(8, _WIRE.size - 8)  # what the header hash covers: all but magic and itself
_PAYLOAD_MAGIC = b"DTPYPKL1"
_MADV_POPULATE_WRITE = 23  # Linux 5.14; older kernels say EINVAL and pages fault in as written
COST_BUDGET = 0.02  # of the step time, as the C++ trainers
COST_BUDGET_WITH_RESCUE = 0.0025  # once snapshots on failure are armed (_on_failure.py)
MAX_EVERY = 10000  # the longest interval between snapshots, in steps

Header = collections.namedtuple("Header", "job rank world_size step attempt payload_bytes payload_hash unix_ms")


class Restored(collections.namedtuple("Restored", "state step")):
    """What dtrun.restore() returns: the state and its step, and `world_size`, the number of ranks
    the job had when it took the state (another than now after an elastic change, or a run given
    another --nproc-per-node: rescale what counts per rank, such as a sampler's position)."""

    def __new__(cls, state, step, world_size=None):
        self = super().__new__(cls, state, step)
        self.world_size = world_size
        return self

    def resume_batch(self, batch, batch_size, saved_batch_size=None, world_size=None):
        """The batch of its epoch to go on at in this run's world, for a state saved after `batch`
        batches of a DistributedSampler epoch, taken by `self.world_size` ranks of
        `saved_batch_size` samples a step (default: `batch_size`, this run's). The sampler deals
        one permutation an epoch whatever the world size, so no sample the old world had not
        trained is skipped, and fewer than one step's are trained again (the C++ trainers do the
        same: worker/epoch_position.h). `world_size`: this run's, by default $WORLD_SIZE."""
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", "1"))
        saved_batch_size = batch_size if saved_batch_size is None else saved_batch_size
        old_world = world_size if self.world_size is None else self.world_size
        _sampler.check_counts("Restored.resume_batch", ("batch", batch, 0), ("batch_size", batch_size, 1),
                              ("saved_batch_size", saved_batch_size, 1), ("world_size", world_size, 1))
        return _sampler.batch_at(batch, old_world, saved_batch_size, world_size, batch_size)


class SnapshotError(Exception):
    """A snapshot that could not be written or read; the message names the cause and the fix."""


def _load_xxhash():
    # dtrun's own first (DTRUN_XXHASH_LIBRARY): a machine with PyTorch from pip may have none.
    for name in (os.environ.get("DTRUN_XXHASH_LIBRARY", ""), "libxxhash.so.0", "libxxhash.so"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.XXH3_64bits.restype = ctypes.c_uint64
            lib.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            return lib
        except (OSError, AttributeError):
            continue
    return None


_xxh = _load_xxhash()


def _hash_at(address, n):
    return _xxh.XXH3_64bits(ctypes.c_void_p(address), n)


def _hash_bytes(data):
    """XXH3 of a bytes-like object. A writable buffer (a copy received from a peer, gigabytes) is
    hashed where it lies: two copies of 1.4 GB took 5.6 s of a restore."""
    view = memoryview(data).cast("B")
    if view.readonly or len(view) == 0:
        return _xxh.XXH3_64bits(bytes(view), len(view))
    return _hash_at(ctypes.addressof(ctypes.c_char.from_buffer(view)), len(view))


def job_hash(run_id):
    return _hash_bytes(run_id.encode())


def encode_header(h):
    wire = bytearray(_WIRE.pack(_MAGIC, _VERSION, _WIRE.size, h.job, h.rank, h.world_size, h.step, h.attempt,
                                h.payload_bytes, h.payload_hash, h.unix_ms, 0))
    struct.pack_into("<Q", wire, _WIRE.size - 8, _hash_bytes(wire[_HASHED]))
    return bytes(wire)


def decode_header(raw, capacity):
    """A slot's header, None for an empty slot; SnapshotError names what is wrong."""
    if raw[:8] == bytes(8):
        return None
    fields = _WIRE.unpack(bytes(raw[:_WIRE.size]))
    magic, version, wire_bytes = fields[:3]
    if magic != _MAGIC:
        raise SnapshotError("snapshot header has no magic")
    if version != _VERSION or wire_bytes != _WIRE.size:
        raise SnapshotError("snapshot header version %d is not %d" % (version, _VERSION))
    if _hash_bytes(bytes(raw[_HASHED])) != fields[-1]:
        raise SnapshotError("snapshot header checksum mismatch (torn or corrupt)")
    h = Header(*fields[3:-1])
    if h.payload_bytes > capacity:
        raise SnapshotError("snapshot claims %d bytes; its slot holds %d" % (h.payload_bytes, capacity))
    if h.step < 0 or h.rank < 0 or h.world_size <= 0 or h.rank >= h.world_size:
        raise SnapshotError("snapshot header out of range (step %d, rank %d of %d)" % (h.step, h.rank, h.world_size))
    return h


class _SlotWriter:
    """A write-only file for torch.save over one slot's payload, taking memory as it grows.

    write() never raises: torch's zip writer writes again from its destructor after an
    exception, and a second one there aborts the process. The first failure is kept in `error`
    and everything after it dropped.
    """

    def __init__(self, region, slot):
        self._region, self._slot = region, slot
        self._view = region.payload(slot)
        self.size = 0
        self.error = None

    def write(self, data):
        n = len(data)
        end = self.size + n
        if self.error is None and end > len(self._view):
            self.error = SnapshotError(_too_large(end, len(self._view)))
        if self.error is None:
            try:
                self._region.reserve(self._slot, end)
            except SnapshotError as e:
                self.error = e
        if self.error is None:
            self._view[self.size:end] = data
            self.size = end
        return n

    def flush(self):
        pass


def _too_large(nbytes, capacity):
    return ("the training state is over %.1f MB, a snapshot slot holds %.1f MB; raise dtrun --snapshot-memory"
            % (nbytes / 1e6, capacity / 1e6))


def _tensor_bytes(obj, depth=0):
    """The bytes of the tensors in a state (dicts, lists, tuples of tensors and plain values)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if depth > 32:
        return 0
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v, depth + 1) for v in obj)
    return 0


class _SlotReader(io.RawIOBase):
    """A read-only, seekable file over a payload for torch.load: tensors are copied once, from the region."""

    def __init__(self, view):
        super().__init__()
        self._view, self._at = view, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), len(self._view) - self._at)
        buffer[:n] = self._view[self._at:self._at + n]
        self._at += n
        return n

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence]
        self._at = max(0, base + offset)
        return self._at

    def tell(self):
        return self._at


class Region:
    """The region behind DTRUN_SNAPSHOT_FD, mapped read-write."""

    def __init__(self, fd, job, rank, world_size, attempt, peers=True):
        st = os.fstat(fd)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        grow_shrink = fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK
        if not stat.S_ISREG(st.st_mode) or seals & grow_shrink != grow_shrink or st.st_size < SLOTS * 2 * KIB4:
            raise SnapshotError("the snapshot fd is not a sealed snapshot region")
        self._fd = fd
        self._map = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._view = memoryview(self._map)
        self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self.slot_bytes = st.st_size // SLOTS // KIB4 * KIB4
        self.capacity = self.slot_bytes - KIB4
        self._reserved = [0] * SLOTS
        self.job, self.rank, self.world_size, self.attempt = job, rank, world_size, attempt
        self.peers = peers

    def _header_at(self, slot):
        return slot * self.slot_bytes

    def _payload_at(self, slot):
        return slot * self.slot_bytes + KIB4

    def payload(self, slot):
        start = self._payload_at(slot)
        return self._view[start:start + self.capacity]

    def header(self, slot):
        start = self._header_at(slot)
        return decode_header(self._view[start:start + _WIRE.size], self.capacity)

    def mine(self, h):
        return h is not None and h.job == self.job and h.rank == self.rank and h.world_size == self.world_size

    def restorable(self, h):
        """Whether this rank may restore `h` (snapshot/peer_restores.h): with peers on, any rank's of
        the job, in any world size it ran in (DDP ranks are replicas); else only its own."""
        return h is not None and h.job == self.job and (self.peers or self.mine(h))

    def reserve(self, slot, nbytes):
        """Takes memory for the payload's first `nbytes` now: a full memory is an error here, not a SIGBUS."""
        if nbytes <= self._reserved[slot]:
            return
        grow = min(self.capacity, max(nbytes, 2 * self._reserved[slot], 1 << 26))
        try:
            os.posix_fallocate(self._fd, self._payload_at(slot), grow)
        except OSError as e:
            raise SnapshotError("no memory for a %d MB snapshot (%s); lower dtrun --snapshot-memory or free memory"
                                % (grow // 1000000, e.strerror))
        self._reserved[slot] = grow
        # Page tables for the range in one call: faulting 4 KiB at a time made first snapshots
        # 10x slower than later ones (as in the C++ writer).
        try:
            self._map.madvise(_MADV_POPULATE_WRITE, self._payload_at(slot), grow)
        except (OSError, ValueError):
            pass

    def invalidate(self, slot):
        start = self._header_at(slot)
        self._view[start:start + 8] = bytes(8)

    def commit(self, slot, h):
        raw = encode_header(h)
        start = self._header_at(slot)
        # All but the magic, then the magic: a reader sees an empty slot or a whole one (x86 and
        # arm64 keep these stores in order as far as another process's loads can tell, and a
        # crashed writer leaves the slot empty).
        self._view[start + 8:start + _WIRE.size] = raw[8:]
        self._view[start:start + 8] = raw[:8]

    def verify(self, slot, h):
        if _hash_at(self._base + self._payload_at(slot), h.payload_bytes) != h.payload_hash:
            raise SnapshotError("snapshot of step %d (slot %d) fails its checksum: corrupted in memory" % (h.step, slot))

    def _headers(self):
        """Every slot's header, None for an empty or damaged one."""
        headers = []
        for s in range(SLOTS):
            try:
                headers.append(self.header(s))
            except SnapshotError:
                headers.append(None)
        return headers

    def slot_to_write(self, step):
        """The slot holding `step`, else an empty or damaged one, else the older one."""
        headers = self._headers()
        for s, h in enumerate(headers):
            if h is not None and h.step == step:
                return s
        for s, h in enumerate(headers):
            if h is None:
                return s
        return min(range(SLOTS), key=lambda s: headers[s].step)

    def usable(self):
        """{step: slot} of this rank's complete snapshots that pass their checksum; damage is said on stderr."""
        found = {}
        for s in range(SLOTS):
            try:
                h = self.header(s)
                if not self.restorable(h):
                    continue  # empty or another job's; with peers off, another rank's or world size's
                self.verify(s, h)
                found[h.step] = s
            except SnapshotError as e:
                _warn("in-memory snapshot slot %d: %s; not used" % (s, e))
                self.invalidate(s)
        return found

    def discard_all_but(self, keep):
        """Empties every slot not holding `keep`: a path the job went back past is never taken later."""
        for s, h in enumerate(self._headers()):
            if not self.restorable(h) or h.step != keep:
                self.invalidate(s)

    def holds(self, step):
        """Whether a slot holds a snapshot of `step` this rank may restore (its header only, not its
        payload): its own, or one the job took in another world size and this rank restored."""
        return any(self.restorable(h) and h.step == step for h in self._headers())

    def write(self, state, step, before_commit=None):
        """torch.save(state) into the slot for `step`; returns the payload's size. `before_commit`
        returns what is wrong with the state just written, if anything: then the slot stays empty."""
        import torch
        tensor_bytes = _tensor_bytes(state)
        if tensor_bytes > self.capacity:  # refused before a byte is serialised
            raise SnapshotError(_too_large(tensor_bytes, self.capacity))
        slot = self.slot_to_write(step)
        self.invalidate(slot)
        writer = _SlotWriter(self, slot)
        writer.write(_PAYLOAD_MAGIC)
        torch.save(state, writer)
        if writer.error is not None:
            raise writer.error
        problem = before_commit() if before_commit is not None else None
        if problem is not None:
            raise SnapshotError(problem)
        payload_hash = _hash_at(self._base + self._payload_at(slot), writer.size)
        self.commit(slot, self._own_header(step, writer.size, payload_hash))
        return writer.size

    def _own_header(self, step, payload_bytes, payload_hash):
        return Header(self.job, self.rank, self.world_size, step, self.attempt, payload_bytes, payload_hash,
                      int(time.time() * 1000))

    def adopt(self, step, data, payload_hash):
        """Keeps `data`, another rank's payload of `step` whose checksum `payload_hash` was checked, as
        this rank's own snapshot of it: a rank that received its state then holds it as its peers do
        (for a second failure before its next snapshot, and for --snapshot-dir)."""
        if len(data) > self.capacity:
            raise SnapshotError(_too_large(len(data), self.capacity))
        slot = self.slot_to_write(step)
        self.invalidate(slot)
        self.reserve(slot, len(data))
        self.payload(slot)[:len(data)] = data
        h = self._own_header(step, len(data), payload_hash)
        self.verify(slot, h)
        self.commit(slot, h)

    def load(self, slot, h, map_location, load_kwargs):
        import torch
        payload = self.payload(slot)[:h.payload_bytes]
        if bytes(payload[:8]) != _PAYLOAD_MAGIC:
            raise SnapshotError("the snapshot of step %d was not written by dtrun.snapshot()" % h.step)
        return torch.load(io.BufferedReader(_SlotReader(payload[8:])), map_location=map_location, **load_kwargs)


def choose(held, peers, completed=None):
    """Which step a job restores, and from where: the rule of worker/restore_choice.h. `held[r]`: the
    steps rank r can restore; `completed[r][i]`: when its snapshot of held[r][i] was completed (Unix
    ms). Returns (step, source, receivers, completed_last): step None for none; source None when
    every rank holds it, else the lowest rank that does, whose copy the ranks without it
    (`receivers`) take. With `peers`, the newest step held by at least half the ranks that hold any
    (the ranks of a DDP job are replicas), or else, given `completed`, the step of the snapshot
    completed last (`completed_last` True: each node's --snapshot-dir copy of a job killed
    everywhere at once holds another step); without, the newest that every rank holds."""
    ranks = len(held)
    holding = sum(1 for steps in held if any(s >= 0 for s in steps))  # ranks with nothing have no say
    quorum = (holding + 1) // 2 if peers else ranks
    for step in sorted({s for steps in held for s in steps if s >= 0}, reverse=True):
        holders = [r for r in range(ranks) if step in held[r]]
        if holders and len(holders) >= quorum:
            return _choice_of(held, step) + (False,)
    last = max(((ms, step) for steps, times in zip(held, completed or []) for step, ms in zip(steps, times)
                if step >= 0), default=None)
    if not peers or last is None:
        return None, None, [], False
    return _choice_of(held, last[1]) + (True,)


def _choice_of(held, step):
    """(step, source, receivers) for a step every rank restores: its own copy, or the lowest holder's."""
    holders = [r for r in range(len(held)) if step in held[r]]
    if len(holders) == len(held):
        return step, None, []
    return step, holders[0], [r for r in range(len(held)) if step not in held[r]]


def peer_size_problem(size, capacity, source):
    """What is wrong with the size `source` declared for its copy (-1: it could not read it), checked
    before anything is allocated against this rank's slot (`capacity`, None: no region); None if nothing."""
    if size < 0:
        return "rank %d could not read its copy" % source
    if capacity is None or size > capacity:
        return "rank %d's copy is %d bytes, more than this rank's slot (give every node the same --snapshot-memory)" % (
            source, size)
    return None


def peer_payload(data, expected_hash, step, source):
    """The state in a copy received from rank `source`, checked; SnapshotError says what is wrong."""
    if _hash_bytes(data) != expected_hash:
        raise SnapshotError("rank %d's copy of step %d does not match its checksum after the transfer" % (source, step))
    if bytes(data[:8]) != _PAYLOAD_MAGIC:
        raise SnapshotError("rank %d's copy of step %d was not written by dtrun.snapshot()" % (source, step))
    return io.BufferedReader(_SlotReader(memoryview(data)[8:]))


class Cadence:
    """Which steps to snapshot: every step whose cost fits the budget's share of the step time.

    Every rank must hold the same steps, so the decision depends only on the step number and on
    an interval the ranks agree on (the largest any rank needs) after each snapshot. With
    dtrun --snapshot-every N: every N-th step, with no agreement needed.
    """

    def __init__(self, forced_every):
        self.forced_every = forced_every
        self.budget = COST_BUDGET  # COST_BUDGET_WITH_RESCUE once a failure keeps the state anyway
        self.every = 1
        self.last_step = None
        self.taken = 0
        self.taken_s = 0.0
        self.last_call = None  # (monotonic time, step) of the previous call

    def due(self, step):
        if self.forced_every > 0:
            return step % self.forced_every == 0 and step != self.last_step
        if self.last_step is None or self.taken < 2:
            return step != self.last_step  # the first maps memory; the second measures the cost
        return step - self.last_step >= self.every

    def step_seconds(self, step, now):
        """The wall time per step since the previous call (None on the first)."""
        prev, self.last_call = self.last_call, (now, step)
        if prev is None or step <= prev[1]:
            return None
        return (now - prev[0]) / (step - prev[1])

    def wanted_every(self, write_s, step_s):
        if step_s is None or step_s <= 0:
            return 1
        return int(min(MAX_EVERY, max(1, math.ceil(write_s / (self.budget * step_s)))))

    def wanted_after(self, write_s, step_s):
        """The interval to ask for after a snapshot that cost `write_s`: what the budget allows, at
        most twice the current one, so one slow write early on (other work on the cores) does not
        space the next ones far apart while the cost is still being learnt."""
        return min(self.wanted_every(write_s, step_s), 2 * self.every)

    def taken_at(self, step, write_s):
        self.last_step = step
        self.taken += 1
        self.taken_s += write_s

    def restart_from(self, step):
        self.last_step = step
        self.last_call = None


def _say(line):
    # One write to fd 2, whole: sys.stderr may be somebody else's object for a moment (PyTorch 2's
    # excepthook swaps in a StringIO while it prefixes the traceback with the rank), and a process
    # keeping its state on the way out may end right after.
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


def _warn(text):
    _say("dtrun: warning: " + text)


def peers_allowed():
    """DTRUN_SNAPSHOT_PEERS (snapshot/peer_restores.h): off or 0 for ranks that are not replicas."""
    return os.environ.get("DTRUN_SNAPSHOT_PEERS", "on") not in ("off", "0")


def region_from_environment(variable="DTRUN_SNAPSHOT_FD"):
    """The agent's region for this rank, or None (not under dtrun, snapshots off, or unusable: said once).

    DTRUN_SNAPSHOT_REPLICA_FD names the second region of a multi-node job: this rank's snapshots
    that also live on the buddy node, or were fetched from it; restore() reads both."""
    fd = os.environ.get(variable, "")
    if not fd:
        return None
    if _xxh is None:
        _warn("libxxhash.so.0 not found (Debian: libxxhash0); training without in-memory snapshots")
        return None
    try:
        return Region(int(fd), job_hash(os.environ.get("TORCHELASTIC_RUN_ID", "")), int(os.environ.get("RANK", "0")),
                      int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                      peers_allowed())
    except (ValueError, OSError, SnapshotError) as e:
        _warn("%s=%s: %s; training without in-memory snapshots" % (variable, fd, e))
        return None

"""Snapshots on failure for dtrun.snapshot(): a rank that survives a failure keeps its state of the
last step on its way out, so a crash loses no step whatever the cadence (docs/DESIGN.md,
"Snapshots on failure"; the C++ trainers do the same in MemorySnapshots::Arm/Rescue).

Every dtrun.snapshot(state, step) call arms `state`. Parameters and optimizer state change only in
an optimizer step, which disarms first, so they are held by reference; every other tensor (a
model's buffers, which the next forward updates inside its kernels, unseen by version counters)
is copied, and the containers are copied shallowly. The version counter of every tensor held by
reference is noted: a state that moved anyway (updated by hand, not by a torch.optim optimizer) is
never written. When the copies cost over 1% of the step time (frozen parameters, which no
optimizer owns), arming stops, said once.

Two ways out write the armed state once, as a snapshot of its step:
- an exception that ends the script (Gloo's error when a peer is gone), through sys.excepthook;
- dtrun's SIGTERM to the ranks that survive a failure. They are usually blocked in a collective,
  where Python runs no signal handler, so signal.set_wakeup_fd wakes a thread that writes it and
  ends the process.
A stop that comes while the state is in motion (an optimizer step, or dtrun.snapshot() itself) is
served by the arming that follows, which writes at once.

A state on a GPU is armed the same way: what is held by reference stays on the GPU, the copies
are queued there (one kernel per dtype, not one per buffer), and an event marks the point where
the armed state is whole. The rescue copies it to the host on a side stream ordered after that
mark alone: the current stream may be stuck behind a collective with the rank that is gone, and
anything queued there (torch.save's own copy included) would wait for ever. The wait is bounded
(RESCUE_WAIT_S); the copies are saved with their GPU's location, as a periodic snapshot is.

A script with a SIGTERM handler of its own keeps it (then only the exception path is taken).
DTRUN_SNAPSHOT_ON_FAILURE=off turns it all off.
"""

import collections
import contextlib
import copy
import functools
import os
import signal
import sys
import threading
import time
import weakref

from dtrun import _snapshots

_MAX_DEPTH = 32  # containers nested deeper are not armed (as _snapshots._tensor_bytes)
ARM_COPY_BUDGET = 0.01  # of the step time, for the copies arming makes
RESCUE_WAIT_S = 10.0  # at most, for the GPU to pass the armed step and copy the state out


class _NotArmable(Exception):
    pass


class _Armed:
    """What a rescue writes: `state` as of `step` (None: the region holds that step already)."""

    __slots__ = ("step", "state", "by_reference", "tensors", "marks")

    def __init__(self, step, state, by_reference, tensors, marks=None):
        self.step, self.state = step, state
        self.by_reference = by_reference  # [(tensor, its version when armed)]
        self.tensors = tensors  # every tensor of `state`, for the check that its values are finite
        self.marks = marks or {}  # GPU -> an event where the state armed is whole on it


class OnFailure:
    """One per process, made by dtrun.snapshot() when the worker has a snapshot region."""

    def __init__(self, region, send, spares):
        self._region = region
        # Sends a progress report: `keeping` makes the agent wait for the write, `kept` lets it
        # stop this worker at once.
        self._send = send
        self._spares = spares  # an exception whose state must not be kept (the replicas diverged)
        self._lock = threading.Lock()  # the armed state, and the region's slots against a rescue
        self._armed = None
        self._moving = 0  # optimizer steps or snapshot() calls under way: a new state is coming
        self._stop_after_arm = 0  # a stop signal that came while the state was moving
        # Optimizer steps since the last arming, and between the two before: when as many steps as
        # usual are done, the script's dtrun.snapshot() call is next (_arming_due).
        self._steps_since_arm = 0
        self._steps_between_arms = 0
        self._optimizers = weakref.WeakSet()  # those that stepped: what they own is held by reference
        self._copy_seconds = 0.0  # the copies' share of arming, measured against the step time
        self._copied_bytes = 0  # at the last arming
        self._first_arm_at = None  # (monotonic time, step)
        self.off = False  # the state cannot be armed (on a device that is neither the host nor a GPU)
        self._installed = False  # the excepthook, and the signal path where it can be had
        self._wakeup = None  # (read fd, write fd) of the pipe signal.set_wakeup_fd writes to
        self.arms, self.arm_seconds = 0, 0.0
        global _watcher
        _watcher = self  # the optimizer steps report to the newest (there is one per process)

    # --- the training thread ---

    def moving(self):
        """dtrun.snapshot() was entered: the armed state is about to be replaced."""
        try:
            _hook_optimizers()
        except Exception as e:  # then nothing is armed: no optimizer is seen stepping
            _snapshots._warn("rank %s: cannot watch the optimizer steps for snapshots on failure: %s" %
                             (self._region.rank, e))
        with self._lock:
            self._moving += 1

    def arm(self, state, step, held):
        """The state after `step`'s optimizer step (`held`: the region holds it already). Never raises."""
        start = time.monotonic()
        armed = None
        try:
            armed = self._armed_state(state, step, held)
        except _NotArmable:
            self.off = True  # such a state stays so: not looked at again every step
        except Exception as e:  # arming must never cost the training step
            _snapshots._warn("rank %s: cannot arm the state of step %d for a failure: %s" %
                             (self._region.rank, step, e))
        if armed is not None and self._over_budget(step):
            armed = None
        with self._lock:
            self._armed, self._moving = armed, 0
            self._steps_between_arms, self._steps_since_arm = self._steps_since_arm, 0
            if armed is not None:
                self.arms += 1
                self.arm_seconds += time.monotonic() - start
            stop, self._stop_after_arm = self._stop_after_arm, 0
            if stop:
                self._rescue_locked()
        if stop:
            _end_process(stop)
        if armed is not None and not self._installed:
            self._install()

    @property
    def armed_once(self):
        return self.arms > 0

    def _over_budget(self, step):
        """Whether the copies of arming cost over ARM_COPY_BUDGET of the step time; then off, said once."""
        now = time.monotonic()
        if self._first_arm_at is None or step <= self._first_arm_at[1]:
            self._first_arm_at, self._copy_seconds = (now, step), 0.0
            return False
        since, steps = now - self._first_arm_at[0], step - self._first_arm_at[1]
        if steps < 10 or self._copy_seconds <= ARM_COPY_BUDGET * since:
            return False
        self.off = True
        _snapshots._warn("rank %d: no snapshots on failure: arming copies %.1f MB a step (tensors no optimizer "
                         "updates, such as frozen parameters), %.1f%% of the step time; the periodic snapshots "
                         "keep the state" % (self._region.rank, self._copied_bytes / 1e6,
                                             100 * self._copy_seconds / since))
        return True

    # --- what is armed ---

    def _armed_state(self, state, step, held):
        if held:
            return _Armed(step, None, [], [])
        owned = self._owned()
        if not owned:
            return None  # no optimizer has stepped: nothing tells the parameters from the rest
        import torch
        by_reference, tensors, copied = [], [], [0, 0.0]  # bytes, seconds
        on_gpu = []  # what no optimizer owns on a GPU: copied after the walk, in a few kernels

        def arm_tensor(t):
            if _copied_at_arm(t, owned):
                if t.is_cuda:
                    on_gpu.append(t)
                    tensors.append(t)
                    return t  # replaced by its copy below
                start = time.monotonic()
                t = t.clone()
                copied[1] += time.monotonic() - start
                copied[0] += t.numel() * t.element_size()
                tensors.append(t)
                return t
            by_reference.append((t, t._version))
            tensors.append(t)
            return t

        with torch.no_grad():
            armed = _map_tensors(state, arm_tensor)
            if on_gpu:
                start = time.monotonic()
                copies = {id(t): c for t, c in zip(on_gpu, _copies_in_few_kernels(on_gpu))}
                copied[1] += time.monotonic() - start
                copied[0] += sum(t.numel() * t.element_size() for t in on_gpu)
                armed = _map_tensors(armed, lambda t: copies.get(id(t), t))
                tensors = [copies.get(id(t), t) for t in tensors]
        marks = {}
        for t in tensors:
            if t.is_cuda and t.device not in marks:  # after the copies above, on the same stream
                marks[t.device] = torch.cuda.Event()
                marks[t.device].record(torch.cuda.current_stream(t.device))
        self._copied_bytes = copied[0]
        self._copy_seconds += copied[1]
        return _Armed(step, armed, by_reference, tensors, marks)

    def _owned(self):
        """The data pointers of what the optimizers seen stepping update in place."""
        owned = set()
        for opt in list(self._optimizers):
            for group in opt.param_groups:
                owned.update(p.data_ptr() for p in group["params"])
            for per_param in opt.state.values():
                if isinstance(per_param, dict):
                    owned.update(v.data_ptr() for v in per_param.values() if hasattr(v, "data_ptr"))
        return owned

    # --- optimizer steps disarm ---

    def _before_step(self, optimizer):
        self._optimizers.add(optimizer)
        with self._lock:  # a rescue under way finishes first
            self._armed = None
            self._moving += 1
            self._steps_since_arm += 1

    def _after_step(self):
        with self._lock:
            self._moving = max(0, self._moving - 1)

    # --- the ways out ---

    def rescue(self):
        with self._lock:
            return self._rescue_locked()

    def _rescue_locked(self):
        """Writes the armed state as a snapshot unless its step is held already; the step kept, or None."""
        a = self._armed
        if a is None:
            return None
        self._armed = None
        region = self._region
        if region.holds(a.step):
            self._send("kept step=%d" % a.step)
            return a.step
        if a.state is None:
            return None  # the snapshot of that step was written over since
        start = time.monotonic()
        # The agent stopping this process waits for the write rather than kill it mid-way, and
        # hears how it ended whichever way it ends.
        self._send("keeping step=%d" % a.step)
        kept = False
        try:
            kept = self._write_locked(a, region, start)
        finally:
            if not kept:
                self._send("not_kept step=%d" % a.step)
        if not kept:
            return None
        self._send("kept step=%d" % a.step)  # last: the agent may kill this process as soon as it hears
        return a.step

    def _write_locked(self, a, region, start):
        """Writes the armed state `a` into the region; whether it was kept."""
        problem = _moved(a)
        state, tensors, locations = a.state, a.tensors, {}
        if problem is None and a.marks:
            try:
                state, tensors, locations = _on_the_host(a)
            except Exception as e:  # the GPU did not get there in time, or CUDA failed
                problem = str(e)
        problem = problem or _not_finite(tensors)
        nbytes = 0
        if problem is None:
            try:
                with _saved_at(locations):
                    nbytes = region.write(state, a.step, before_commit=lambda: _moved(a))
            except Exception as e:  # SnapshotError, or torch.save refusing an object
                problem = str(e)
        if problem is not None:
            _snapshots._warn("rank %d: state of step %d not kept in memory on the way out: %s" %
                             (region.rank, a.step, problem))
            return False
        _snapshots._say("rank %d: kept the state of step %d in memory on the way out (%.1f MB in %.1f ms)" %
                        (region.rank, a.step, nbytes / 1e6, 1e3 * (time.monotonic() - start)))
        return True

    def on_uncaught(self, previous_hook):
        def hook(kind, value, tb):
            previous_hook(kind, value, tb)  # the traceback first: it says why the job failed
            if not issubclass(kind, KeyboardInterrupt) and not self._spares(value):
                self.rescue()

        return hook

    def _install(self):
        self._installed = True
        sys.excepthook = self.on_uncaught(sys.excepthook)
        # Handlers are the main thread's to set. A script's own SIGTERM handler stays (then only
        # exceptions are watched).
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._watch_signals()

    def _watch_signals(self):
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except (ValueError, OSError):
            previous = None
        if previous != -1:  # somebody else's (asyncio): leave signals to them
            if previous is not None:
                signal.set_wakeup_fd(previous)
            os.close(r)
            os.close(w)
            return
        self._wakeup = (r, w)
        signal.signal(signal.SIGTERM, self._on_signal_in_main_thread)
        threading.Thread(target=self._watch, name="dtrun-on-failure", daemon=True).start()
        # The forking thread holds SIGTERM back across fork(), so that the child's copy meets it only
        # once it has let go of this process's handler and pipe.
        os.register_at_fork(before=_hold_stop, after_in_parent=_release_stop, after_in_child=self._forget_in_child)

    def _watch(self):
        """The signal thread: woken through the wakeup fd even while the main thread is blocked in C++."""
        r = self._wakeup[0]
        while True:
            try:
                data = os.read(r, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                self._on_stop(signal.SIGTERM)

    def _arming_due(self):
        """The optimizer steps that come between two armings are done, and the arming is not: the
        script is between its step and its dtrun.snapshot() call. Nothing is armed there (the step
        changed the state), and the arming is at hand."""
        return self._steps_between_arms > 0 and self._steps_since_arm == self._steps_between_arms

    def _on_stop(self, signo):
        with self._lock:
            if self._armed is None and (self._moving or self._arming_due()):
                self._stop_after_arm = signo  # the arming that ends this step writes, then ends
                return
            self._rescue_locked()
        _end_process(signo)

    def _on_signal_in_main_thread(self, signo, frame):
        # The wakeup thread acts on it. Unless somebody has since taken the wakeup fd for their own:
        # then nobody would, and the signal does what it does without dtrun.
        current = signal.set_wakeup_fd(self._wakeup[1], warn_on_full_buffer=False)
        if current != self._wakeup[1]:
            signal.set_wakeup_fd(current)
            signal.signal(signo, signal.SIG_DFL)
            os.kill(os.getpid(), signo)

    def _forget_in_child(self):
        # A forked child (a DataLoader worker) holds no training state: it dies of SIGTERM as before,
        # and its signals must not wake this process's thread through the shared pipe.
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _release_stop()


_watcher = None  # the OnFailure that optimizer steps disarm
_hooked_globally = False


def _before_step(optimizer):
    if _watcher is not None:
        _watcher._before_step(optimizer)


def _after_step():
    if _watcher is not None:
        _watcher._after_step()


def _hook_optimizers():
    """Optimizer steps disarm: PyTorch 2's global step hooks, or each optimizer class's step in 1.x."""
    global _hooked_globally
    from torch.optim import optimizer as hooks
    if hasattr(hooks, "register_optimizer_step_pre_hook"):  # PyTorch 2.0 and later
        if not _hooked_globally:
            hooks.register_optimizer_step_pre_hook(lambda opt, args, kwargs: _before_step(opt))
            hooks.register_optimizer_step_post_hook(lambda opt, args, kwargs: _after_step())
            _hooked_globally = True
        return
    # Again at each call, for optimizer classes defined since.
    todo = list(hooks.Optimizer.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "_dtrun_disarms", False):
            cls.step = _disarming(step)


def _disarming(step):
    @functools.wraps(step)  # keeps PyTorch's own marks, such as `hooked`
    def disarming_step(optimizer, *args, **kwargs):
        _before_step(optimizer)
        try:
            return step(optimizer, *args, **kwargs)
        finally:
            _after_step()

    disarming_step._dtrun_disarms = True
    return disarming_step


_held_already = threading.local()  # whether the forking thread held SIGTERM back itself


def _hold_stop():
    _held_already.value = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _release_stop():
    if not getattr(_held_already, "value", True):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _moved(a):
    for t, version in a.by_reference:
        if t._version != version:
            return ("a tensor changed after dtrun.snapshot() outside an optimizer step "
                    "(only torch.optim optimizers' steps are known to dtrun)")
    return None


def _copied_at_arm(t, owned):
    """Whether arming copies `t` (no optimizer updates it) rather than holding it by reference."""
    if not (t.is_cpu or t.is_cuda):
        raise _NotArmable()
    try:
        t._version
        key = t.data_ptr()
    except RuntimeError:  # an inference or sparse tensor: no version counter or no data pointer
        raise _NotArmable()
    return bool(key) and key not in owned


def _map_tensors(obj, fn, depth=0):
    """`obj` with fn(t) for every tensor t; containers copied shallowly (an optimizer's per-parameter
    dicts in a state_dict() are its live ones), numbers and strings as they are now."""
    import torch
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if depth > _MAX_DEPTH:
        raise _NotArmable()
    if isinstance(obj, dict):
        items = [(k, _map_tensors(v, fn, depth + 1)) for k, v in obj.items()]
        if type(obj) is dict:
            return dict(items)
        if type(obj) is collections.OrderedDict:  # a state_dict(), with its _metadata
            out = collections.OrderedDict(items)
            out.__dict__.update(obj.__dict__)
            return out
        out = copy.copy(obj)
        out.update(items)
        return out
    if isinstance(obj, list):
        return [_map_tensors(v, fn, depth + 1) for v in obj]
    if isinstance(obj, tuple):
        items = [_map_tensors(v, fn, depth + 1) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


def _copies_in_few_kernels(tensors):
    """Copies of `tensors`, one kernel per device and dtype: a ResNet-50's 160 batch-norm buffers,
    cloned one by one, would cost its step about a millisecond of launches more."""
    import torch
    groups = collections.defaultdict(list)
    for i, t in enumerate(tensors):
        groups[(t.device, t.dtype)].append(i)
    out = [None] * len(tensors)
    for members in groups.values():
        flat = torch.cat([tensors[i].reshape(-1) for i in members])
        at = 0
        for i in members:
            n = tensors[i].numel()
            out[i] = flat[at:at + n].view(tensors[i].shape)
            at += n
    return out


def _on_the_host(a):
    """The armed state with host copies of its tensors on a GPU, their GPU by the copy's address,
    and every tensor of it, for the finiteness check. The copies run on a side stream once the GPU
    has passed the armed step's mark, on a thread of their own: RESCUE_WAIT_S bounds the wait."""
    import torch
    done, result = threading.Event(), {}

    def copy_out():
        try:
            host, locations = {}, {}
            for device, mark in a.marks.items():
                # High priority: ProcessGroupNCCL takes its streams from the low-priority pool,
                # and the one stuck in the collective with the rank that is gone may come round.
                side = torch.cuda.Stream(device=device, priority=-1)
                side.wait_event(mark)
                with torch.cuda.stream(side):
                    for t in a.tensors:
                        if t.device == device:
                            # Into pageable memory, each copy waited for on the side stream: no
                            # pinned allocation, whose CUDA call could wait on the stuck GPU.
                            h = host[id(t)] = t.to("cpu")
                            locations[_storage_address(h)] = str(device)
                side.synchronize()
            result["host"], result["locations"] = host, locations
        except BaseException as e:
            result["error"] = e
        finally:
            done.set()

    threading.Thread(target=copy_out, name="dtrun-rescue-copy", daemon=True).start()
    if not done.wait(RESCUE_WAIT_S):
        raise RuntimeError("the GPU did not reach the end of step %d within %.0f s (stuck in a collective?)"
                           % (a.step, RESCUE_WAIT_S))
    if "error" in result:
        raise result["error"]
    host = result["host"]
    state = _map_tensors(a.state, lambda t: host.get(id(t), t))
    return state, [host.get(id(t), t) for t in a.tensors], result["locations"]


def _storage_address(t):
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


_saved_locations = {}  # storage address -> the location torch.save writes for it (_saved_at)
_tagger_registered = False


def _location_of_host_copy(storage):
    return _saved_locations.get(storage.data_ptr()) if _saved_locations else None


@contextlib.contextmanager
def _saved_at(locations):
    """torch.save writes the host copies in `locations` as on their GPU: the state a rescue kept
    loads where a periodic snapshot's would (dtrun.restore's map_location decides either way)."""
    global _tagger_registered
    if not locations:
        yield
        return
    import torch.serialization
    if not _tagger_registered:
        # Ahead of torch's own taggers (10 and up); a deserializer that never takes a storage.
        torch.serialization.register_package(5, _location_of_host_copy, lambda storage, location: None)
        _tagger_registered = True
    _saved_locations.update(locations)
    try:
        yield
    finally:
        _saved_locations.clear()


def _not_finite(tensors):
    for t in tensors:
        if t.is_floating_point() and not _all_finite(t):
            return "a value is not finite"
    return None


def _all_finite(t):
    """Without a bool copy of the tensor: a NaN or an infinity shows in its minimum or maximum, one
    pass (isfinite().all() over a 1.4 GB state took 3.2 s on the way out, aminmax 0.1 s)."""
    import torch
    if t.numel() == 0:
        return True
    try:
        return all(bool(torch.isfinite(v)) for v in torch.aminmax(t))
    except RuntimeError:  # no aminmax for this dtype here (float16 on the CPU in torch 1.x)
        return all(bool(torch.isfinite(c).all()) for c in t.reshape(-1).split(1 << 20))


def _end_process(signo):
    # As SIGTERM would have, had dtrun not caught it (a thread cannot restore its default action).
    os._exit(128 + signo)



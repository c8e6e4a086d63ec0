"""dtrun.watch_ddp: each rank's wait inside DDP's gradient all-reduce, reported to the agent.

Under DDP every rank leaves a step's all-reduce together, so step times cannot tell which rank is
slow; the rank that arrives last waits least. A communication hook does what DDP's default hook
does (average the bucket with one all-reduce) and notes, for the step's last bucket, how long the
all-reduce took from this rank's launch to its completion. No extra collective, and on Gloo no
wait that DDP would not do anyway.

On CUDA (NCCL) the host never waits for the collective, so the host's clock would see nothing:
there the wait is GPU time between two CUDA events -- recorded when the last bucket is ready and
once the all-reduce is done -- read at the next step, and only once complete (Event.query, never
a synchronisation). A step whose events are not complete by then is not reported. That path has
not yet run on a GPU in dtrun's tests (docs/DESIGN.md, "Stragglers"): should it raise, the reports
stop with one line on stderr and training goes on.
"""

import sys
import threading
import time


class _Watch:
    def __init__(self, send, group):
        self._send = send
        self.group = group
        self._lock = threading.Lock()  # completion callbacks run on the backend's threads
        self._step = 0
        self._last_end = None
        self._gpu_lap = None  # CUDA: (step, start, stop, previous stop) of the newest step
        self.gpu_failed = False

    def _report(self, step, wait_s, step_s):
        self._send("sync step=%d wait_us=%d step_us=%d" % (step, int(wait_s * 1e6), int(step_s * 1e6)))

    def finished(self, launched):
        now = time.monotonic()
        with self._lock:
            self._step += 1
            step_s = 0.0 if self._last_end is None else now - self._last_end
            self._last_end = now
            step = self._step
        self._report(step, now - launched, step_s)

    def finished_on_gpu(self, start, stop):
        """The step's events are recorded; reports the step before if the GPU has finished it."""
        with self._lock:
            self._step += 1
            before = self._gpu_lap
            self._gpu_lap = (self._step, start, stop, before[2] if before else None)
        if before is None:
            return
        step, b_start, b_stop, b_previous = before
        if not b_stop.query():
            return  # the GPU is still at it: nobody waits for it here
        step_s = b_previous.elapsed_time(b_stop) / 1e3 if b_previous is not None else 0.0
        self._report(step, b_start.elapsed_time(b_stop) / 1e3, step_s)


def _hook(watch, bucket):
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(watch.group)
    tensor = bucket.buffer().div_(world)
    last = bucket.is_last()
    start = None
    if last and tensor.is_cuda and not watch.gpu_failed:
        start = torch.cuda.Event(enable_timing=True)
        start.record()  # on backward's stream: this rank's gradients are ready here
    launched = time.monotonic()
    future = dist.all_reduce(tensor, group=watch.group, async_op=True).get_future()

    def done(f):
        if last and start is None and not tensor.is_cuda:
            watch.finished(launched)
        elif start is not None:
            try:
                stop = torch.cuda.Event(enable_timing=True)
                stop.record()  # the callback's stream waits for the all-reduce
                watch.finished_on_gpu(start, stop)
            except Exception as e:  # never fail a training step for a report
                watch.gpu_failed = True
                sys.stderr.write("dtrun.watch_ddp: this rank's all-reduce waits are not reported (%s)\n" % e)
        return f.value()[0]

    return future.then(done)


def watch(model, send, group=None):
    if not hasattr(model, "register_comm_hook"):
        raise TypeError("dtrun.watch_ddp: expected a torch.nn.parallel.DistributedDataParallel model, got %s"
                        % type(model).__name__)
    try:
        model.register_comm_hook(_Watch(send, group), _hook)
    except RuntimeError as e:  # DDP takes one hook: the script's own stays
        sys.stderr.write("dtrun.watch_ddp: this rank's all-reduce waits are not reported (%s)\n" % e)
    return model

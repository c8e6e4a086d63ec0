"""dtrun.watch_ddp: each rank's wait inside DDP's gradient all-reduce, reported to the agent.

Under DDP every rank leaves a step's all-reduce together, so step times cannot tell which rank is
slow; the rank that arrives last waits least. A communication hook does what DDP's default hook
does (average the bucket with one all-reduce) and notes, for the step's last bucket, how long the
all-reduce took from this rank's launch to its completion. No extra collective, and on Gloo no
wait that DDP would not do anyway.
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

    def finished(self, launched):
        now = time.monotonic()
        with self._lock:
            self._step += 1
            step_s = 0.0 if self._last_end is None else now - self._last_end
            self._last_end = now
            step = self._step
        self._send("sync step=%d wait_us=%d step_us=%d" % (step, int((now - launched) * 1e6), int(step_s * 1e6)))


def _hook(watch, bucket):
    import torch.distributed as dist

    world = dist.get_world_size(watch.group)
    tensor = bucket.buffer().div_(world)
    launched = time.monotonic()
    future = dist.all_reduce(tensor, group=watch.group, async_op=True).get_future()
    last = bucket.is_last()

    def done(f):
        if last:
            watch.finished(launched)
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

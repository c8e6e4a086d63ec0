"""Unit tests of dtrun._ddp_watch's CUDA bookkeeping without a GPU: events stand in as objects with
a GPU timestamp, complete or not. A step is reported one step late, only once its events are
complete, with the step time from the stop before.

    PYTHONPATH=build/lib/dtrun/python python3 tests/python/ddp_watch_test.py
"""
import unittest

from dtrun import _ddp_watch


class FakeEvent:
    """A CUDA event recorded at GPU time `at_ms`; `done` says whether the GPU has passed it."""

    def __init__(self, at_ms, done=True):
        self.at_ms = at_ms
        self.done = done

    def query(self):
        return self.done

    def elapsed_time(self, later):
        return later.at_ms - self.at_ms


class GpuLapTest(unittest.TestCase):
    def setUp(self):
        self.sent = []
        self.watch = _ddp_watch._Watch(self.sent.append, None)

    def test_each_step_is_reported_at_the_next_with_its_gpu_wait_and_step_time(self):
        self.watch.finished_on_gpu(FakeEvent(80), FakeEvent(100))
        self.assertEqual(self.sent, [], "nothing is known before the next step")
        self.watch.finished_on_gpu(FakeEvent(170), FakeEvent(200))
        self.assertEqual(self.sent, ["sync step=1 wait_us=20000 step_us=0"])
        self.watch.finished_on_gpu(FakeEvent(290), FakeEvent(300))
        self.assertEqual(self.sent[-1], "sync step=2 wait_us=30000 step_us=100000")

    def test_a_step_the_gpu_has_not_finished_is_skipped_not_waited_for(self):
        self.watch.finished_on_gpu(FakeEvent(80), FakeEvent(100, done=False))
        self.watch.finished_on_gpu(FakeEvent(170), FakeEvent(200))
        self.assertEqual(self.sent, [])
        self.watch.finished_on_gpu(FakeEvent(250), FakeEvent(300))
        self.assertEqual(self.sent, ["sync step=2 wait_us=30000 step_us=100000"])


if __name__ == "__main__":
    unittest.main()

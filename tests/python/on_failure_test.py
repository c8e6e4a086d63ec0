"""Unit tests of dtrun._on_failure (snapshots on failure for dtrun.snapshot) without an agent: what
is armed, what a rescue writes and refuses, and the ways out (SIGTERM while blocked, during an
optimizer step, in a forked child, an uncaught exception) in child processes over a region made
here.

    PYTHONPATH=build/lib/dtrun/python python3 tests/python/on_failure_test.py
"""
import collections
import io
import os
import select
import signal
import subprocess
import sys
import textwrap
import unittest
from unittest import mock

from dtrun import _on_failure, _snapshots as s
from snapshots_test import make_region

try:
    import torch
except ImportError:
    torch = None


def train(steps, keeper, model, opt, start=0):
    """`steps` steps of a small model, each ended as dtrun.snapshot() ends it: armed."""
    for step in range(start, start + steps):
        keeper.moving()
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        keeper.arm(state_of(model, opt), step + 1, held=False)


def state_of(model, opt):
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "note": "text"}


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


@unittest.skipIf(torch is None or s._xxh is None, "needs torch and libxxhash")
class RescueTest(unittest.TestCase):
    def setUp(self):
        self.fd, self.region = make_region(1 << 20)
        self.reports = []  # what the agent would hear
        self.keeper = _on_failure.OnFailure(self.region, self.reports.append, lambda e: False)
        self.keeper._installed = True  # no signal handler or excepthook in the test's own process
        self.model, self.opt = model_and_optimizer()

    def tearDown(self):
        os.close(self.fd)

    def rescue(self):
        said = []
        with mock.patch.object(s, "_say", said.append):
            step = self.keeper.rescue()
        return step, "\n".join(said)

    def restored(self, step):
        slot = self.region.usable()[step]
        return self.region.load(slot, self.region.header(slot), None, {})

    def test_a_rescue_writes_the_state_of_the_last_arming_not_what_came_after(self):
        train(3, self.keeper, self.model, self.opt)
        expected = {k: v.clone() for k, v in self.model.state_dict().items()}
        momentum = [b.clone() for b in (self.opt.state[p]["momentum_buffer"] for p in self.model.parameters())]
        self.model(torch.randn(8, 4)).pow(2).mean().backward()  # the next forward moves the buffers
        self.assertFalse(torch.equal(self.model[1].running_mean, expected["1.running_mean"]))
        step, said = self.rescue()
        self.assertEqual(step, 3)
        self.assertIn("rank 0: kept the state of step 3 in memory on the way out", said)
        self.assertEqual(self.reports, ["keeping step=3", "kept step=3"])
        state = self.restored(3)
        self.assertEqual(state["note"], "text")
        for k, v in expected.items():
            self.assertTrue(torch.equal(state["model"][k], v), k)
        for got, want in zip(state["optimizer"]["state"].values(), momentum):
            self.assertTrue(torch.equal(got["momentum_buffer"], want))
        other, _ = model_and_optimizer()
        other.load_state_dict(state["model"])  # the state_dict's _metadata came along
        self.assertEqual(self.keeper.rescue(), None, "a state is written once")

    def test_the_parameters_are_held_by_reference_and_the_buffers_copied(self):
        train(2, self.keeper, self.model, self.opt)
        armed = self.keeper._armed
        held = {t.data_ptr() for t, _ in armed.by_reference}
        for p in self.model.parameters():
            self.assertIn(p.data_ptr(), held)
        for b in self.model.buffers():  # the forward changed them since the previous arming
            self.assertNotIn(b.data_ptr(), held)

    def test_an_optimizer_step_disarms(self):
        train(2, self.keeper, self.model, self.opt)
        self.model(torch.randn(8, 4)).pow(2).mean().backward()
        self.opt.step()
        self.assertEqual(self.rescue(), (None, ""))
        self.assertFalse(self.region.holds(2))
        self.assertEqual(self.reports, [])

    def test_a_parameter_changed_outside_an_optimizer_step_is_not_kept(self):
        train(2, self.keeper, self.model, self.opt)
        with torch.no_grad():
            self.model[0].weight.add_(1)
        step, said = self.rescue()
        self.assertIsNone(step)
        self.assertIn("state of step 2 not kept in memory on the way out: a tensor changed after dtrun.snapshot()",
                      said)
        self.assertFalse(self.region.holds(2))
        self.assertEqual(self.reports, ["keeping step=2", "not_kept step=2"])  # the agent stops waiting

    def test_a_value_that_is_not_finite_is_not_kept(self):
        train(1, self.keeper, self.model, self.opt)
        with torch.no_grad():
            self.model[0].bias[0] = float("nan")
        self.keeper.arm(state_of(self.model, self.opt), 1, held=False)
        step, said = self.rescue()
        self.assertIsNone(step)
        self.assertIn("a value is not finite", said)

    def test_a_nan_or_an_infinity_is_found_in_every_floating_type(self):
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):  # float16: the fallback on 1.x
            for bad in (float("nan"), float("inf"), -float("inf")):
                t = torch.randn(3000, 7).to(dtype)
                self.assertTrue(_on_failure._all_finite(t), dtype)
                t[2999, 6] = bad
                self.assertFalse(_on_failure._all_finite(t), (dtype, bad))
                self.assertFalse(_on_failure._all_finite(t[:, ::3]), (dtype, bad))  # a strided view
        self.assertTrue(_on_failure._all_finite(torch.empty(0)))

    def test_a_step_the_region_holds_is_reported_kept_and_not_written_again(self):
        train(2, self.keeper, self.model, self.opt)
        self.region.write(state_of(self.model, self.opt), 2)
        written = self.region.header(self.region.usable()[2])
        self.keeper.arm(state_of(self.model, self.opt), 2, held=True)
        self.assertEqual(self.rescue(), (2, ""))
        self.assertEqual(self.reports, ["kept step=2"])  # nothing to wait for
        self.assertEqual(self.region.header(self.region.usable()[2]), written)

    def test_a_rescue_takes_the_older_slot(self):
        for step in (5, 10):
            self.region.write(state_of(self.model, self.opt), step)
        train(1, self.keeper, self.model, self.opt, start=12)
        self.rescue()
        self.assertEqual(sorted(self.region.usable()), [10, 13])

    def test_a_state_on_neither_the_host_nor_a_gpu_is_not_armed_again(self):
        train(1, self.keeper, self.model, self.opt)
        self.keeper.moving()
        self.keeper.arm({"on_device": torch.empty(2, device="meta")}, 2, held=False)
        self.assertTrue(self.keeper.off)
        self.assertEqual(self.rescue(), (None, ""))

    def test_arming_a_state_with_nothing_to_copy_costs_no_copy_time(self):
        # Only copies count against ARM_COPY_BUDGET: a tiny model's millisecond steps would otherwise
        # turn arming off for the walk alone.
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        train(3, self.keeper, model, opt)
        self.assertIsNotNone(self.keeper._armed)
        self.assertEqual(self.keeper._copy_seconds, 0.0)

    def test_the_arming_walk_copies_containers_and_maps_every_tensor(self):
        # The GPU's copies replace the live tensors in a second walk of the armed state.
        Pair = collections.namedtuple("Pair", "a b")
        ordered = collections.OrderedDict([("z", torch.zeros(1)), ("a", torch.ones(1))])
        ordered._metadata = {"": {"version": 1}}
        state = {"x": [torch.tensor(1.0), (torch.tensor(2.0), Pair(torch.tensor(3.0), "s"))], "o": ordered, "n": 4}
        seen = []
        mapped = _on_failure._map_tensors(state, lambda t: seen.append(t) or t * 10)
        self.assertEqual(len(seen), 5)
        self.assertEqual(mapped["x"][1][1].a.item(), 30.0)
        self.assertIsInstance(mapped["x"][1][1], Pair)
        self.assertEqual(list(mapped["o"]), ["z", "a"])
        self.assertEqual(mapped["o"]._metadata, ordered._metadata)
        self.assertEqual(mapped["n"], 4)

    def test_copies_in_few_kernels_hold_each_tensors_values_apart_from_it(self):
        tensors = [torch.randn(3, 4), torch.tensor(7), torch.arange(5), torch.randn(2).double(), torch.randn(6)[::2]]
        copies = _on_failure._copies_in_few_kernels(tensors)
        for t, c in zip(tensors, copies):
            self.assertEqual((c.shape, c.dtype), (t.shape, t.dtype))
            self.assertTrue(torch.equal(c, t))
        for t in tensors:
            t.add_(1)
        self.assertFalse(any(torch.equal(c, t) for t, c in zip(tensors, copies)))

    def test_host_copies_of_a_gpus_tensors_are_saved_as_on_that_gpu(self):
        copy_of_gpu, on_host = torch.randn(3), torch.randn(2)
        saved = io.BytesIO()
        with _on_failure._saved_at({_on_failure._storage_address(copy_of_gpu): "cuda:0"}):
            torch.save({"g": copy_of_gpu, "h": on_host}, saved)
        saved.seek(0)
        loaded = torch.load(saved, map_location="cpu")
        self.assertTrue(torch.equal(loaded["g"], copy_of_gpu))
        tags = []
        saved.seek(0)
        torch.load(saved, map_location=lambda storage, location: tags.append(location) or storage)
        self.assertEqual(sorted(tags), ["cpu", "cuda:0"])
        later = io.BytesIO()  # the tag holds only inside the block
        torch.save(copy_of_gpu, later)
        later.seek(0)
        tags.clear()
        torch.load(later, map_location=lambda storage, location: tags.append(location) or storage)
        self.assertEqual(tags, ["cpu"])

    def test_no_optimizer_seen_stepping_arms_nothing(self):
        keeper = _on_failure.OnFailure(self.region, self.reports.append, lambda e: False)
        keeper.arm(state_of(self.model, self.opt), 0, held=False)
        self.assertIsNone(keeper._armed)


# A child process over the test's region (its fd passed down): trains two steps, arms, then does
# what PLAN says. It prints ARMED once armed.
CHILD = textwrap.dedent("""
    import os, signal, sys
    import torch
    from dtrun import _on_failure, _snapshots as s
    sys.path.insert(0, sys.argv[3])
    from on_failure_test import train, state_of, model_and_optimizer
    region = s.Region(int(sys.argv[1]), s.job_hash("job"), 0, 2, 0)
    plan = sys.argv[2]
    kept = []
    keeper = _on_failure.OnFailure(region, kept.append, lambda e: isinstance(e, KeyError))
    model, opt = model_and_optimizer()
    train(2, keeper, model, opt)
    if plan == "forked child":
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print("CHILD", "killed" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM else status,
              flush=True)
        print("KEPT", kept, flush=True)
        sys.exit(0)
    print("ARMED", flush=True)
    if plan == "blocked":
        r, w = os.pipe()
        os.read(r, 1)  # never written: SIGTERM finds the main thread here
    elif plan == "stop in step":
        keeper.moving()
        keeper._before_step(opt)  # an optimizer step under way
        keeper._on_stop(signal.SIGTERM)  # what the signal thread does with SIGTERM
        print("DEFERRED", flush=True)
        keeper._after_step()
        keeper.arm(state_of(model, opt), 3, held=False)
        print("NOT ENDED", flush=True)
    elif plan == "stop after step":
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()  # disarms: the script's dtrun.snapshot() call comes next
        keeper._on_stop(signal.SIGTERM)
        print("DEFERRED", flush=True)
        keeper.moving()
        keeper.arm(state_of(model, opt), 3, held=False)
        print("NOT ENDED", flush=True)
    elif plan == "raise":
        raise RuntimeError("a peer is gone")
    elif plan == "spared":
        raise KeyError("replicas diverged")
""")


@unittest.skipIf(torch is None or s._xxh is None, "needs torch and libxxhash")
class WayOutTest(unittest.TestCase):
    def setUp(self):
        self.fd, self.region = make_region(1 << 20)

    def tearDown(self):
        os.close(self.fd)

    def run_child(self, plan, signal_when_armed=False):
        here = os.path.dirname(os.path.abspath(__file__))
        p = subprocess.Popen([sys.executable, "-c", CHILD, str(self.fd), plan, here], pass_fds=[self.fd],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if signal_when_armed:
            ready, _, _ = select.select([p.stdout], [], [], 120)
            if not ready:
                p.kill()
                p.communicate()
                self.fail("the child did not arm in 120 s")
            self.assertEqual(p.stdout.readline(), "ARMED\n")
            p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()  # no stray process outlives the test
            out, err = p.communicate()
            self.fail("the child did not end in 120 s:\n" + out + err)
        return p.returncode, out, err

    def test_sigterm_while_blocked_keeps_the_state_and_ends_the_process(self):
        rc, _, err = self.run_child("blocked", signal_when_armed=True)
        self.assertEqual(rc, 128 + signal.SIGTERM, err)
        self.assertIn("kept the state of step 2 in memory on the way out", err)
        self.assertTrue(self.region.holds(2))

    def test_sigterm_during_an_optimizer_step_is_served_by_the_next_arming(self):
        rc, out, err = self.run_child("stop in step")
        self.assertEqual(rc, 128 + signal.SIGTERM, out + err)
        self.assertIn("DEFERRED", out)
        self.assertNotIn("NOT ENDED", out)
        self.assertIn("kept the state of step 3 in memory on the way out", err)
        self.assertEqual(sorted(self.region.usable()), [3])

    # Between the optimizer step and the dtrun.snapshot() call after it nothing is armed; a stop
    # there (`dtrun kill` caught one rank in that window on a busy machine) kept nothing, and the
    # ranks went back to the last periodic snapshot.
    def test_sigterm_between_the_step_and_its_snapshot_call_is_served_by_the_arming(self):
        rc, out, err = self.run_child("stop after step")
        self.assertEqual(rc, 128 + signal.SIGTERM, out + err)
        self.assertIn("DEFERRED", out)
        self.assertNotIn("NOT ENDED", out)
        self.assertIn("kept the state of step 3 in memory on the way out", err)
        self.assertEqual(sorted(self.region.usable()), [3])

    def test_an_uncaught_exception_keeps_the_state_after_its_traceback(self):
        rc, _, err = self.run_child("raise")
        self.assertEqual(rc, 1, err)
        self.assertLess(err.index("RuntimeError: a peer is gone"), err.index("kept the state of step 2"))
        self.assertTrue(self.region.holds(2))

    def test_an_exception_that_says_the_replicas_diverged_keeps_nothing(self):
        rc, _, err = self.run_child("spared")
        self.assertEqual(rc, 1, err)
        self.assertNotIn("kept the state", err)
        self.assertEqual(self.region.usable(), {})

    def test_a_forked_child_dies_of_sigterm_without_waking_the_parent(self):
        rc, out, err = self.run_child("forked child")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("CHILD killed", out)
        self.assertIn("KEPT []", out)


if __name__ == "__main__":
    unittest.main()

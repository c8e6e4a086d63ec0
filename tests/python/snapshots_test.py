"""Unit tests of dtrun._snapshots without an agent: the cadence, the slot headers, a region made
here (a sealed memfd, as the agent makes it), writes that do not fit, and damaged slots.

    PYTHONPATH=build/lib/dtrun/python python3 tests/python/snapshots_test.py
"""
import fcntl
import os
import unittest

from dtrun import _snapshots as s

try:
    import torch
except ImportError:
    torch = None


def make_region(nbytes, rank=0, world=2):
    fd = os.memfd_create("test-region", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, nbytes)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)
    return fd, s.Region(fd, s.job_hash("job"), rank, world, 0)


class ChooseTest(unittest.TestCase):
    """The same rule as worker/restore_choice.h (tests/worker/restore_choice_test.cc)."""

    def test_a_step_every_rank_holds_is_each_ranks_own(self):
        self.assertEqual(s.choose([[12, 10], [10, 12]], True), (12, None, [], False))

    def test_ranks_without_the_newest_step_receive_the_lowest_holders_copy(self):
        self.assertEqual(s.choose([[19, 18, 10], [19, 18, 10], [10], [10]], True), (19, 0, [2, 3], False))
        self.assertEqual(s.choose([[], [21, 18]], True), (21, 1, [0], False))

    def test_without_peers_only_a_step_every_rank_holds(self):
        self.assertEqual(s.choose([[19, 18, 10], [19, 18, 10], [10], [10]], False), (10, None, [], False))
        self.assertEqual(s.choose([[5], []], False), (None, None, [], False))

    def test_a_lone_holder_of_a_newer_step_does_not_decide(self):
        self.assertEqual(s.choose([[36, 32], [36, 32], [36, 32], [40, 36]], True), (36, None, [], False))

    def test_ranks_that_hold_nothing_have_no_say(self):
        # A world that grew from 1 rank to 4: the new ranks receive the old world's state.
        self.assertEqual(s.choose([[30, 27], [], [], []], True), (30, 0, [1, 2, 3], False))
        self.assertEqual(s.choose([[40, 36], [36], [36], []], True), (36, 0, [3], False))

    def test_with_no_step_held_by_half_the_snapshot_completed_last_is_taken(self):
        # Each node's --snapshot-dir copy of a job killed everywhere at once: another step on each.
        held, completed = [[290], [280], [270]], [[9000], [8700], [8400]]
        self.assertEqual(s.choose(held, True, completed), (290, 0, [1, 2], True))
        # A stale line's newer step lost to the line the job went on with, whatever its number.
        self.assertEqual(s.choose([[500], [300], [290]], True, [[1000], [9000], [8700]]), (300, 1, [0, 2], True))
        self.assertEqual(s.choose([[7], [7]], True, [[5], [5]]), (7, None, [], False))
        # Without times, or without peers: disk.
        self.assertEqual(s.choose(held, True), (None, None, [], False))
        self.assertEqual(s.choose(held, False, completed), (None, None, [], False))

    def test_a_declared_size_is_checked_against_this_ranks_slot_before_allocating(self):
        self.assertIsNone(s.peer_size_problem(4096, 4096, 0))
        self.assertIn("rank 2 could not read its copy", s.peer_size_problem(-1, 4096, 2))
        for size in (4097, 1 << 62):
            self.assertIn("--snapshot-memory", s.peer_size_problem(size, 4096, 0))
        self.assertIn("--snapshot-memory", s.peer_size_problem(10, None, 0))  # no region here

    def test_a_received_copy_is_checked(self):
        data = s._PAYLOAD_MAGIC + b"state"
        if s._xxh is None:
            self.skipTest("no libxxhash")
        self.assertEqual(s.peer_payload(data, s._hash_bytes(data), 3, 0).read(), b"state")
        with self.assertRaisesRegex(s.SnapshotError, "rank 0's copy of step 3 does not match its checksum"):
            s.peer_payload(data, s._hash_bytes(data) ^ 1, 3, 0)
        other = b"DTOTHER1state"
        with self.assertRaisesRegex(s.SnapshotError, "not written by dtrun.snapshot"):
            s.peer_payload(other, s._hash_bytes(other), 3, 0)

    def test_a_received_buffer_is_hashed_where_it_lies_with_the_same_result(self):
        if s._xxh is None:
            self.skipTest("no libxxhash")
        data = s._PAYLOAD_MAGIC + bytes(range(256)) * 64
        writable = bytearray(data)
        self.assertEqual(s._hash_bytes(writable), s._hash_bytes(data))
        self.assertEqual(s._hash_bytes(memoryview(writable)[8:]), s._hash_bytes(data[8:]))
        self.assertEqual(s._hash_bytes(b""), s._hash_bytes(bytearray()))
        if torch is not None:  # as dtrun.restore() receives a copy: a tensor's numpy view
            received = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            view = memoryview(received.numpy())
            self.assertEqual(s.peer_payload(view, s._hash_bytes(data), 3, 0).read(8), bytes(range(8)))


class XxhashTest(unittest.TestCase):
    def test_the_library_dtrun_names_comes_first_and_a_wrong_name_falls_back(self):
        from unittest import mock
        if s._xxh is None:
            self.skipTest("no libxxhash")
        tried = []
        real_cdll = s.ctypes.CDLL

        def cdll(name):
            tried.append(name)
            return real_cdll(name)

        with mock.patch.dict(os.environ, {"DTRUN_XXHASH_LIBRARY": "/nonexistent/libxxhash.so.0"}), \
                mock.patch.object(s.ctypes, "CDLL", cdll):
            lib = s._load_xxhash()
        self.assertIsNotNone(lib)
        self.assertEqual(tried[:2], ["/nonexistent/libxxhash.so.0", "libxxhash.so.0"])


class CadenceTest(unittest.TestCase):
    def test_the_first_two_steps_then_the_agreed_interval(self):
        c = s.Cadence(0)
        self.assertTrue(c.due(1))
        c.taken_at(1, 0.01)
        self.assertFalse(c.due(1))  # the same step twice is kept once
        self.assertTrue(c.due(2))
        c.taken_at(2, 0.01)
        c.every = c.wanted_every(0.01, 0.1)  # 10 ms against 2% of 100 ms: every 5th step
        self.assertEqual(c.every, 5)
        self.assertEqual([step for step in range(3, 13) if c.due(step)], [7, 8, 9, 10, 11, 12])

    def test_the_interval_at_most_doubles_per_snapshot(self):
        c = s.Cadence(0)
        wanted = []
        for _ in range(5):
            c.every = c.wanted_after(0.01, 0.1)  # the budget allows every 5th step
            wanted.append(c.every)
        self.assertEqual(wanted, [2, 4, 5, 5, 5])
        c.every = c.wanted_after(0.5, 0.1)  # one slow write: 250 by the budget, 10 for now
        self.assertEqual(c.every, 10)

    def test_a_forced_interval_is_every_nth_step_number(self):
        c = s.Cadence(4)
        self.assertEqual([step for step in range(1, 13) if c.due(step)], [4, 8, 12])

    def test_the_wanted_interval_is_bounded(self):
        c = s.Cadence(0)
        self.assertEqual(c.wanted_every(0.0, 0.1), 1)
        self.assertEqual(c.wanted_every(1.0, None), 1)
        self.assertEqual(c.wanted_every(1e9, 1e-9), s.MAX_EVERY)

    def test_step_time_is_wall_time_per_step_between_calls(self):
        c = s.Cadence(0)
        self.assertIsNone(c.step_seconds(10, 100.0))
        self.assertAlmostEqual(c.step_seconds(14, 102.0), 0.5)
        self.assertIsNone(c.step_seconds(14, 103.0))  # no step taken


class HeaderTest(unittest.TestCase):
    def test_round_trip_and_every_flipped_byte_is_refused(self):
        h = s.Header(s.job_hash("j"), 1, 4, 77, 0, 100, 12345, 1700000000000)
        raw = s.encode_header(h)
        self.assertEqual(s.decode_header(raw, 1000), h)
        for i in range(len(raw)):
            bad = bytearray(raw)
            bad[i] ^= 0x40
            if bytes(bad[:8]) == bytes(8):
                continue
            with self.assertRaises(s.SnapshotError, msg="byte %d" % i):
                s.decode_header(bytes(bad), 1000)

    def test_empty_slot_and_a_size_beyond_the_slot(self):
        self.assertIsNone(s.decode_header(bytes(88), 1000))
        raw = s.encode_header(s.Header(1, 0, 1, 5, 0, 5000, 1, 1))
        with self.assertRaisesRegex(s.SnapshotError, "its slot holds 1000"):
            s.decode_header(raw, 1000)


class RegionTest(unittest.TestCase):
    def test_a_file_that_is_not_a_sealed_region_is_refused(self):
        fd = os.memfd_create("unsealed")
        os.ftruncate(fd, 1 << 20)
        with self.assertRaisesRegex(s.SnapshotError, "not a sealed snapshot region"):
            s.Region(fd, 0, 0, 1, 0)

    @unittest.skipIf(torch is None, "needs torch")
    def test_write_restore_and_a_corrupted_payload(self):
        fd, region = make_region(1 << 20)
        state = {"w": torch.arange(1000, dtype=torch.float32), "step": 3}
        region.write(state, 3)
        state["w"] += 1
        region.write(state, 4)
        held = region.usable()
        self.assertEqual(sorted(held), [3, 4])
        back = region.load(held[4], region.header(held[4]), None, {})
        self.assertTrue(torch.equal(back["w"], state["w"]))
        # A byte changed in memory: the checksum finds it, the slot is emptied, the other stays.
        region.payload(held[4])[200] ^= 1
        self.assertEqual(list(region.usable()), [3])
        self.assertIsNone(region.header(held[4]))
        # Another job's slots are never this rank's; another rank's or world size's are only with
        # peers off (ranks that are not replicas).
        self.assertEqual(s.Region(fd, s.job_hash("another job"), 0, 2, 0).usable(), {})
        self.assertEqual(s.Region(fd, s.job_hash("job"), 1, 2, 0, peers=False).usable(), {})
        self.assertEqual(s.Region(fd, s.job_hash("job"), 0, 3, 0, peers=False).usable(), {})
        self.assertEqual(list(s.Region(fd, s.job_hash("job"), 1, 2, 0).usable()), [3])

    @unittest.skipIf(torch is None, "needs torch")
    def test_after_a_world_size_change_the_old_worlds_state_is_held_and_kept(self):
        fd, old_world = make_region(1 << 20, rank=3, world=4)
        old_world.write({"w": torch.ones(3)}, 7)
        new_world = s.Region(fd, s.job_hash("job"), 1, 2, 0)
        self.assertTrue(new_world.holds(7))  # a rescue of the restored step writes nothing
        new_world.discard_all_but(7)  # as restore() does after choosing it
        self.assertEqual(list(new_world.usable()), [7])
        self.assertEqual(new_world.header(new_world.usable()[7]).world_size, 4)
        self.assertFalse(s.Region(fd, s.job_hash("job"), 1, 2, 0, peers=False).holds(7))

    def test_restored_unpacks_as_state_and_step_and_names_its_world(self):
        restored = s.Restored({"a": 1}, 5, 4)
        state, step = restored
        self.assertEqual((state, step, restored.world_size), ({"a": 1}, 5, 4))

    def test_a_resumed_batch_covers_the_samples_the_old_world_trained_and_repeats_under_a_step(self):
        # Rank r of a world of w takes positions r, r + w, ... of the epoch's one permutation: the
        # first b batches of size n cover its first b * w * n positions, whatever the world.
        for old_world, saved, new_world, size, batch in [(2, 8, 3, 8, 9), (4, 16, 1, 16, 5), (3, 16, 2, 48, 7),
                                                         (1, 5, 4, 3, 0), (2, 8, 2, 8, 11)]:
            resumed = s.Restored({}, 1, old_world).resume_batch(batch, size, saved, world_size=new_world)
            trained = batch * old_world * saved
            self.assertLessEqual(resumed * new_world * size, trained)
            self.assertLess(trained - resumed * new_world * size, new_world * size)
        self.assertEqual(s.Restored({}, 1, 2).resume_batch(9, 8, world_size=2), 9)  # the same world
        os.environ["WORLD_SIZE"] = "4"
        try:
            self.assertEqual(s.Restored({}, 1, 2).resume_batch(9, 8), 4)  # this run's world by default
        finally:
            del os.environ["WORLD_SIZE"]
        for bad in ({"batch": -1}, {"batch_size": 0}, {"saved_batch_size": 2.5}, {"world_size": True}):
            args = {"batch": 3, "batch_size": 8, "world_size": 2, **bad}
            with self.assertRaisesRegex(ValueError, f"Restored.resume_batch: {next(iter(bad))} must be an int"):
                s.Restored({}, 1, 2).resume_batch(**args)

    @unittest.skipIf(torch is None, "needs torch")
    def test_a_state_over_the_slot_is_refused_and_the_slots_stay(self):
        _, region = make_region(64 * 1024)
        region.write({"w": torch.zeros(10)}, 1)
        with self.assertRaisesRegex(s.SnapshotError, "raise dtrun --snapshot-memory"):
            region.write({"w": torch.zeros(100000)}, 2)
        # An object that is no tensor but pickles large: the streaming writer stops it, never raising mid-save.
        with self.assertRaisesRegex(s.SnapshotError, "raise dtrun --snapshot-memory"):
            region.write({"blob": b"x" * 100000}, 3)
        self.assertEqual(list(region.usable()), [1])

    @unittest.skipIf(torch is None, "needs torch")
    def test_discard_all_but_keeps_only_the_restored_step(self):
        _, region = make_region(1 << 20)
        region.write({"a": torch.ones(3)}, 5)
        region.write({"a": torch.ones(3)}, 6)
        region.discard_all_but(5)
        self.assertEqual(list(region.usable()), [5])
        region.discard_all_but(-1)
        self.assertEqual(region.usable(), {})


if __name__ == "__main__":
    unittest.main()

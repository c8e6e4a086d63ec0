"""Unit tests of dtrun.ResumableSampler with torch's own DistributedSampler and DataLoader: an epoch
resumed in another world size trains every sample the old world had not, repeats fewer than one
step's, and never loads the ones it skips; the epochs after it are whole.

    PYTHONPATH=build/lib/dtrun/python python3 tests/python/sampler_test.py
"""
import os
import subprocess
import sys
import unittest

import dtrun
from dtrun import _snapshots

try:
    import torch
    from torch.utils.data import DataLoader, Dataset, DistributedSampler
except ImportError:
    torch = None


if torch is not None:

    class Recorded(Dataset):
        """Sample i is i; every index loaded is recorded."""

        def __init__(self, n):
            self.n = n
            self.loaded = []

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            self.loaded.append(i)
            return i


def epoch_of(dataset, world, rank, batch_size, epoch, start_batch=0):
    """The indices rank `rank` of `world` trains in `epoch`, from batch `start_batch` on."""
    sampler = dtrun.ResumableSampler(DistributedSampler(dataset, world, rank, shuffle=True, seed=3))
    sampler.set_epoch(epoch)
    sampler.start_at(start_batch, batch_size)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    expected_batches = -(-(len(dataset) // world - start_batch * batch_size) // batch_size)
    assert len(loader) == max(0, expected_batches), (len(loader), expected_batches)
    return [i for b in loader for i in b.tolist()], sampler


@unittest.skipIf(torch is None, "needs torch")
class ResumableSamplerTest(unittest.TestCase):
    def test_an_epoch_resumed_in_another_world_trains_what_the_old_one_had_not_without_loading_the_rest(self):
        for old_world, saved_batch, new_world, batch_size, batches_done in [(2, 8, 3, 8, 9), (4, 5, 2, 10, 3),
                                                                           (3, 8, 1, 16, 4), (2, 8, 2, 8, 7)]:
            dataset = Recorded(240)
            trained = []
            for r in range(old_world):
                trained += epoch_of(dataset, old_world, r, saved_batch, 5)[0][:batches_done * saved_batch]
            restored = _snapshots.Restored({}, 100, old_world)
            start = restored.resume_batch(batches_done, batch_size, saved_batch, world_size=new_world)
            dataset.loaded.clear()
            resumed = []
            for r in range(new_world):
                resumed += epoch_of(dataset, new_world, r, batch_size, 5, start)[0]
            self.assertEqual(sorted(dataset.loaded), sorted(resumed))  # the skipped ones never loaded
            self.assertEqual(set(trained) | set(resumed), set(range(240)))  # no sample skipped
            repeated = len(trained) + len(resumed) - 240
            self.assertGreaterEqual(repeated, 0)
            self.assertLess(repeated, new_world * batch_size)  # under one step's

    def test_only_the_resumed_epoch_is_shortened(self):
        dataset = Recorded(64)
        sampler = dtrun.ResumableSampler(DistributedSampler(dataset, 2, 1, shuffle=True, seed=0))
        sampler.start_at(3, 4)
        self.assertEqual(len(sampler), 32 - 12)  # a progress bar's length, before the epoch
        sampler.set_epoch(0)
        resumed = list(sampler)
        self.assertEqual(len(resumed), 20)
        self.assertEqual(len(sampler), 32)
        sampler.set_epoch(0)
        self.assertEqual(list(sampler)[12:], resumed)  # the same permutation, its first 12 dropped
        sampler.start_at(100, 4)  # past the epoch's end (a snapshot taken after its last batch)
        self.assertEqual(list(sampler), [])
        self.assertEqual(len(list(sampler)), 32)

    def test_a_bad_position_is_refused_with_its_name(self):
        sampler = dtrun.ResumableSampler(range(10))
        for args, name in [((-1, 4), "batch"), ((2, 0), "batch_size"), ((1.5, 4), "batch"), ((True, 4), "batch")]:
            with self.assertRaisesRegex(ValueError, f"ResumableSampler.start_at: {name} must be an int"):
                sampler.start_at(*args)
        self.assertEqual(list(sampler), list(range(10)))  # any iterable with a length, no set_epoch
        sampler.set_epoch(1)


class ImportTest(unittest.TestCase):
    def test_import_dtrun_and_the_sampler_stay_free_of_torch(self):
        code = "import sys, dtrun; dtrun.ResumableSampler(range(3)); print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ),
                             timeout=60)
        self.assertEqual(out.stdout.strip(), "False", out.stderr)


if __name__ == "__main__":
    unittest.main()

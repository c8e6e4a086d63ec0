"""dtrun.ResumableSampler: an epoch resumed from a snapshot goes on at its next batch, without
loading the batches it already trained.

    sampler = dtrun.ResumableSampler(DistributedSampler(dataset))
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    start_epoch, start_batch = 0, 0
    restored = dtrun.restore()
    if restored:
        start_epoch = restored.state["epoch"]
        start_batch = restored.resume_batch(restored.state["batch"], batch_size, restored.state["batch_size"])
        sampler.start_at(start_batch, batch_size)
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for batch, (x, y) in enumerate(loader, start_batch if epoch == start_epoch else 0):
            train_step(x, y)
            dtrun.snapshot({..., "epoch": epoch, "batch": batch + 1, "batch_size": batch_size}, step)

Skipping by iterating the loader reads and decodes every skipped sample: for an epoch of images,
minutes of a restart. This drops the skipped indices before the loader sees them. No torch import:
a DataLoader takes any iterable with a length as its sampler.
"""

import itertools


def check_counts(where, *checks):
    """Raises ValueError naming `where` and the argument for the first (name, value, least) whose
    value is not an int (bools refused) of at least `least`."""
    for name, value, least in checks:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{where}: {name} must be an int of at least {least}, not {value!r}")


def batch_at(batch, saved_world, saved_batch_size, world_size, batch_size):
    """Restored.resume_batch's rule: the first `batch` steps of `saved_world` ranks of
    `saved_batch_size` cover the permutation's first batch * saved_world * saved_batch_size samples;
    the last whole step of this world within them."""
    return batch * saved_world * saved_batch_size // (world_size * batch_size)


class ResumableSampler:
    """Wraps a sampler (a DistributedSampler, or any with a length) so that its next epoch can
    start past its first samples; every epoch after that one is whole."""

    def __init__(self, sampler):
        self.sampler = sampler
        self._skip = 0

    def start_at(self, batch, batch_size):
        """The next epoch begins at batch `batch` of `batch_size` samples (this rank's), as
        Restored.resume_batch gives it; the batches before it are not loaded."""
        check_counts("ResumableSampler.start_at", ("batch", batch, 0), ("batch_size", batch_size, 1))
        self._skip = batch * batch_size

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def __iter__(self):
        skip, self._skip = self._skip, 0  # one epoch only
        return itertools.islice(iter(self.sampler), skip, None)

    def __len__(self):
        return max(0, len(self.sampler) - self._skip)

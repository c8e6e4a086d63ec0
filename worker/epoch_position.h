// Where an epoch continues when the job's global batch (samples a step, job-wide) is not the one
// its position was saved at: an elastic job that lost or gained ranks, a run resumed with another
// --nproc-per-node or --batch-size. Every sampler here (data/sampler.h, the recsys trainer's)
// deals one permutation an epoch that does not depend on the world size, rank r taking positions
// r, r + world, r + 2·world, …; so the first `next_batch` steps of the job cover exactly the
// permutation's first next_batch × global_batch samples, whatever the world. The new world goes on
// at the last whole step of its own within them: it repeats fewer than one step's samples and
// skips none.
#pragma once

#include <cstdint>

namespace dtrun::worker {

// The first batch of the epoch not yet trained, at `global_batch` samples a step. A saved global
// batch <= 0 (a file from before it was recorded), a non-positive `next_batch` or `global_batch`
// leave `next_batch` as it is. Exact for any int64 inputs (no overflow).
int64_t NextBatchAtGlobalBatch(int64_t next_batch, int64_t saved_global_batch, int64_t global_batch);

}  // namespace dtrun::worker

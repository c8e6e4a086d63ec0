#include "worker/epoch_position.h"

namespace dtrun::worker {

int64_t NextBatchAtGlobalBatch(int64_t next_batch, int64_t saved_global_batch, int64_t global_batch) {
  if (next_batch <= 0 || saved_global_batch <= 0 || global_batch <= 0 || saved_global_batch == global_batch) {
    return next_batch;
  }
  // Both factors are below 2^63, so their product fits in 126 bits; the quotient is at most
  // next_batch × saved_global_batch, which a global batch of 1 could push past int64.
  const unsigned __int128 samples =
      static_cast<unsigned __int128>(next_batch) * static_cast<unsigned __int128>(saved_global_batch);
  const unsigned __int128 steps = samples / static_cast<unsigned __int128>(global_batch);
  return steps > static_cast<unsigned __int128>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(steps);
}

}  // namespace dtrun::worker

// How fast buddy copies go out: a duty cycle over the time the sender was busy with a chunk, so
// that replication lags rather than slows training. Busy is the chunk's wall time less the time
// the thread waited for a CPU: on cores the training fills, a low-priority sender waits most of
// its wall time, and pausing for that waiting too made copies fall a whole boundary behind
// (docs/BENCHMARKS.md, node loss on the AMD EPYC). The pause a chunk earns is taken before the
// next one is sent, so the last chunk of a copy is not held back: the copy lands at once and its
// pause delays the next copy instead.
#pragma once

#include <algorithm>
#include <utility>

namespace dtrun::replica {

class SendPacer {
 public:
  // `duty`: the share of time the sender may be busy (clamped to 0.001 .. 1).
  explicit SendPacer(double duty) : duty_(std::clamp(duty, 0.001, 1.0)) {}

  // A chunk went out in `wall_s` seconds, `queued_s` of which the thread waited to run. Returns
  // the pause owed by the chunk before it, to be taken now, before the next chunk.
  double Sent(double wall_s, double queued_s) {
    const double busy = std::max(0.0, wall_s - std::max(0.0, queued_s));
    return std::exchange(owed_s_, busy * (1.0 / duty_ - 1.0));
  }
  // The pause still owed before a new copy starts (then none).
  double TakeOwed() { return std::exchange(owed_s_, 0.0); }

 private:
  double duty_;
  double owed_s_ = 0;
};

}  // namespace dtrun::replica

// --snapshot-dir's copies while the job runs (docs/DESIGN.md, "Snapshots past the job's end"):
// every `every` (--snapshot-dir-every; longer when a pass takes over a tenth of the time between
// passes), a thread at nice 10 writes each local rank's newest snapshot, when it is newer than the
// one last written, to the rank's file in the directory. So a
// job whose agent is killed too (SIGKILL after the scheduler's grace, the OOM killer, a crash)
// still leaves its next run a state at most `every` old. A copy the worker overwrote while it was
// read is dropped and taken at the next pass.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "agent/snapshot_dir.h"
#include "agent/snapshot_store.h"
#include "base/checked_mutex.h"

namespace dtrun {

class SnapshotPersister {
 public:
  // Starts the thread. `dir`, `store` outlive this object.
  SnapshotPersister(const SnapshotDir& dir, const SnapshotStore& store, uint64_t job, std::chrono::milliseconds every);
  ~SnapshotPersister();  // Stop()

  // One pass now, on the caller's thread: each rank's newest snapshot not written yet. Returns
  // the lines worth saying (a rank that could not be written; said once until it can again).
  std::vector<std::string> PersistNow();
  // Ends the thread after its current pass (before the job's end writes the same files).
  void Stop();
  // The newest step written for each local rank (-1: none yet).
  std::vector<int64_t> written() const;

 private:
  void Loop();

  const SnapshotDir& dir_;
  const SnapshotStore& store_;
  const uint64_t job_;
  const std::chrono::milliseconds every_;
  CheckedMutex pass_mu_;  // one pass at a time (the thread's, or PersistNow's)
  mutable CheckedMutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int64_t> written_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> failing_ ABSL_GUARDED_BY(pass_mu_);
  std::thread thread_;
};

}  // namespace dtrun

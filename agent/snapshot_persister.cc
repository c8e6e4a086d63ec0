#include "agent/snapshot_persister.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/guarded_thread.h"
#include "spdlog/spdlog.h"

namespace dtrun {

SnapshotPersister::SnapshotPersister(const SnapshotDir& dir, const SnapshotStore& store, uint64_t job,
                                     std::chrono::milliseconds every)
    : dir_(dir), store_(store), job_(job), every_(every) {
  written_.assign(store_.nproc(), -1);
  failing_.assign(store_.nproc(), false);
  spdlog::default_logger_raw();  // made here, not first in the thread
  thread_ = std::thread([this] { Loop(); });
}

SnapshotPersister::~SnapshotPersister() { Stop(); }

void SnapshotPersister::Stop() {
  {
    CheckedMutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::vector<int64_t> SnapshotPersister::written() const {
  CheckedMutexLock lock(&mu_);
  return written_;
}

std::vector<std::string> SnapshotPersister::PersistNow() {
  CheckedMutexLock pass(&pass_mu_);
  std::vector<std::string> lines;
  std::vector<int64_t> theirs;  // ranks whose files another run wrote: one line for all
  for (int lr = 0; lr < store_.nproc(); ++lr) {
    const std::optional<snapshot::SlotHeader> newest = store_.Newest(lr);
    {
      CheckedMutexLock lock(&mu_);
      if (!newest || newest->job != job_ || newest->step == written_[lr]) continue;
    }
    absl::StatusOr<std::vector<snapshot::SlotHeader>> kept = dir_.KeepRank(store_, lr, job_, snapshot::Slots::kNewest);
    if (kept.ok() && !kept->empty()) {
      CheckedMutexLock lock(&mu_);
      written_[lr] = kept->back().step;
    }
    // Rewritten while copied is the worker going on: the next pass takes a newer one.
    const bool failed = !kept.ok() && !absl::IsAborted(kept.status());
    if (failed && !failing_[lr] && absl::IsFailedPrecondition(kept.status())) {
      theirs.push_back(newest->rank);
    } else if (failed && !failing_[lr]) {
      lines.push_back(absl::StrCat("local rank ", lr, ": cannot copy its snapshot to ", dir_.path(), ": ",
                                   kept.status().message(), " (tried again every pass)"));
    }
    if (kept.ok() || failed) failing_[lr] = failed;
  }
  if (!theirs.empty()) lines.push_back(dir_.AnotherRunsLine(theirs, "not copied; tried again every pass"));
  return lines;
}

void SnapshotPersister::Loop() {
  // Below the training, as the buddy copies (agent/replicator.cc): a copy may lag, training not.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  RunGuarded(
      "the --snapshot-dir copies",
      [this] {
        std::chrono::steady_clock::duration wait = every_;
        for (;;) {
          {
            CheckedMutexLock lock(&mu_);
            auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
            if (mu_.AwaitWithTimeout(stopping, wait)) return;
          }
          const auto start = std::chrono::steady_clock::now();
          for (const std::string& line : PersistNow()) spdlog::warn("{}", line);
          // The disk busy with copies at most a tenth of the time: a state of many GB on a slow
          // disk is copied less often than asked, rather than all the time.
          wait = std::max<std::chrono::steady_clock::duration>(every_, 9 * (std::chrono::steady_clock::now() - start));
        }
      },
      [](const absl::Status& st) { spdlog::warn("{}; the job's end still keeps its snapshots", std::string(st.message())); });
}

}  // namespace dtrun

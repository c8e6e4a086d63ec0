// In-memory recovery as an agent component: the snapshot regions this node's workers write (held
// across restarts), their copies on a buddy node (multi-node), and each recovery followed from the
// failure to every local rank stepping again, with its phases in the event log and on the console.
// The Agent asks it three things: the regions to hand a round's workers, whether a round may start
// (its buddy copies fetched, or the snapshots a stopped run kept in --snapshot-dir loaded), and
// whether every rank's state is safe (a short stop grace); and tells it when the job ends.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent_component.h"
#include "agent/agent_options.h"
#include "agent/event_log.h"
#include "agent/recovery_tracker.h"
#include "agent/replicator.h"
#include "agent/snapshot_dir.h"
#include "agent/snapshot_persister.h"
#include "agent/snapshot_store.h"
#include "base/event_loop.h"
#include "progress/report_protocol.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun {

class SnapshotRecovery : public AgentComponent {
 public:
  SnapshotRecovery(EventLoop& loop, EventLog& events, const AgentOptions& options);
  ~SnapshotRecovery() override;

  // Creates the regions and, given `replication`, starts the buddy copies. On failure, says so in
  // one line; the job runs on without (recovery falls back to disk checkpoints).
  void Start(std::optional<BuddyReplication> replication);
  bool enabled() const { return store_.enabled(); }
  const SnapshotStore& store() const { return store_; }
  // The regions a round's workers get, by local rank.
  void AddRegionsTo(WorkerGroup::Io& io) const;
  // Every local rank's state is in a complete snapshot.
  bool AllRanksSnapshotted() const;
  // How long a stop after a failure waits for the workers before SIGKILL. The whole
  // `shutdown_timeout` unless every local rank's state is in a snapshot; then the workers, usually
  // blocked in a collective with a rank that is gone, have only their state of the last step to
  // keep on the way out (snapshots on failure): 0.5 s, or twice the slowest snapshot write a
  // worker reported when that is longer (a large state takes seconds), at most `shutdown_timeout`.
  std::chrono::milliseconds StopGrace(std::chrono::milliseconds shutdown_timeout) const;
  // False while the round's buddy copies are still being fetched, or (first round only) the
  // snapshots kept in --snapshot-dir loaded; the loop wakes when done. Once true, what the fetch or
  // the load found is logged.
  bool ReadyFor(const rdzv::Assignment& a);
  // How a job ended. kStopped: by a signal or `dtrun kill` (preempted, interrupted).
  enum class JobEnd { kSucceeded, kStopped, kFailed };
  // The job ended (after its workers exited; blocks for the writes): with --snapshot-dir, an
  // unfinished job keeps every local rank's snapshots there, a finished one removes them. A run
  // that loaded kept snapshots and failed before any newer one is told how to start afresh: a
  // program changed since (another model) fails on them at every run.
  void OnJobEnd(JobEnd end);
  Replicator::BuddyView buddy() const { return replicator_ ? replicator_->View() : Replicator::BuddyView{}; }
  // For `dtrun status`: by local rank, the newest step of its snapshot in --snapshot-dir, loaded
  // from there or copied since (-1: none, or no --snapshot-dir).
  std::vector<int64_t> KeptSteps() const;

  // A worker's report (the running round's, already checked): snapshots to pin for the buddy,
  // restored state and steps for the recovery under way.
  void OnReport(int local_rank, const progress::Report& report);
  // The round stopped on a failure (here or on another node), or this spare was promoted to take a
  // lost node's ranks (`step_before` -1). Only the first call of a recovery counts.
  void OnFailure(int64_t step_before);
  bool recovering() const { return tracker_.active(); }
  // One line on every recovery so far ("" if none): the job's end shows it.
  std::string Summary() const { return FormatRecoveries(tracker_.completed()); }

  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) override;
  void OnGroupExited(WorkerGroup& group) override;
  // The same hooks without a WorkerGroup (unit tests).
  void RoundStarted(int64_t round);
  void GroupExited();

 private:
  void OnRecovered(const Recovery& done);
  // The first round's load from --snapshot-dir: started on a thread, true once it ended.
  bool LoadedFor(const rdzv::Assignment& a);
  void OnLoaded();
  void StartCopies();
  // The newest step loaded from --snapshot-dir when no local rank has a newer snapshot (-1 else).
  int64_t StuckAtLoadedStep() const;

  EventLoop& loop_;
  EventLog& events_;
  const AgentOptions& options_;
  SnapshotStore store_;
  RecoveryTracker tracker_;
  std::unique_ptr<Replicator> replicator_;  // buddy copies (null: single node, or off)
  int64_t round_ = -1;
  int64_t slowest_write_us_ = 0;  // the longest snapshot write any worker reported
  std::optional<SnapshotDir> dir_;  // --snapshot-dir
  UniqueFd run_lock_;               // dir_->HoldRun's, until the job ends
  enum class Load { kNone, kRunning, kDone } load_ = Load::kNone;
  UniqueFd load_done_;        // the loader's eventfd: written when it ends
  std::thread loader_;
  std::chrono::steady_clock::time_point load_started_;
  SnapshotDir::Outcome loaded_;  // the loader's; read after it is joined
  std::vector<int64_t> loaded_steps_;  // by local rank, the newest step loaded (-1: none)
  struct Ranks {
    int64_t first = 0;
    int64_t world_size = 0;  // 0: no round yet
  } ranks_;  // this node's global ranks in the latest round
  std::unique_ptr<SnapshotPersister> persister_;  // --snapshot-dir-every's copies, once the load is done
};

}  // namespace dtrun

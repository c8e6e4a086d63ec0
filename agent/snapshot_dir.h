// dtrun --snapshot-dir DIR (docs/DESIGN.md, "Snapshots past the job's end"): when a job ends
// unfinished (interrupted, preempted, out of restarts, killed), each agent keeps its ranks'
// in-memory snapshots in DIR, and the next run with the same DIR loads them into its regions
// before its first workers start: they resume from the newest step instead of the last disk
// checkpoint. A job that succeeds removes them, so its next run starts fresh.
//
// One file per global rank, DIR/rank-R-of-W.dtsnap (snapshot/snapshot_file.h), replaced in one
// step, so a stop in the middle of writing leaves the older file whole. A file of another run
// that is still running (two jobs given one directory) is neither loaded, replaced nor removed,
// and a line says so: a job does not resume from, or clobber, the state of one running beside it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/snapshot_store.h"
#include "base/checked_mutex.h"
#include "base/unique_fd.h"
#include "snapshot/snapshot_file.h"
#include "snapshot/snapshot_region.h"

namespace dtrun {

class SnapshotDir {
 public:
  // What a Keep or a Load did, for one line on the console.
  struct Outcome {
    int ranks = 0;               // whose snapshots were written or loaded
    std::vector<int64_t> steps;  // their steps, ascending, each once
    uint64_t bytes = 0;
    std::vector<std::string> problems;  // a line each: a rank not kept, a file not used
    int64_t taken_by_world = 0;         // loaded from another world size's files (0: this one's)
    // Keep: files of another world size this run removed as older. Load: this world's files
    // removed as older than the other world's it loaded.
    int superseded = 0;
    void Add(const std::vector<snapshot::SlotHeader>& headers);
    // "2 ranks' snapshots of steps 118, 120 (8.4 MB)"
    std::string Describe() const;
  };

  // Creates `path` (0700) when it is missing. FailedPrecondition names the path and the fix when it
  // is not a directory, is another user's, or any user may write in it (anyone could plant a state
  // for the workers to load).
  static absl::StatusOr<SnapshotDir> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // Writes each local rank's snapshots of `job` to its rank's file; a rank with none leaves the
  // directory as it was.
  Outcome Keep(const SnapshotStore& store, uint64_t job) const;
  // The same for one local rank, `which` of its two slots: the headers written, oldest first (none:
  // it holds no snapshot of `job`, and its file stays). Aborted: its worker rewrote the slot while
  // it was copied (snapshot/snapshot_file.h); FailedPrecondition: the file is another run's
  // (AnotherRunsLine); the file stays then too. Once a file is written, the files of the other
  // world sizes that Load found (none with DTRUN_SNAPSHOT_PEERS=off) hold an older state of the
  // replicas: those the rank answers for (their rank mod its world size,
  // Clear's rule) are removed, or a later run back in that world would go back to them.
  absl::StatusOr<std::vector<snapshot::SlotHeader>> KeepRank(const SnapshotStore& store, int local_rank, uint64_t job,
                                                             snapshot::Slots which) const;
  // Loads the files of global ranks `first_rank`.. (one per local rank) of a world of `world_size`
  // into the store's empty regions, under `job`. The ranks are replicas (snapshot/peer_restores.h),
  // so of the world sizes whose files the directory holds (the nodes or --nproc-per-node changed
  // between runs), the one whose files these ranks would take were written last, this world's own
  // on a tie: a rank takes its own rank's file of that world, else the first whose rank maps to it
  // (rank mod world_size), so that each file is taken once job-wide. When that is another world,
  // once a file of it is loaded, these ranks' own files of this world are removed: they are older,
  // and left beside this run's first copies they would outvote them at a later restore. With
  // DTRUN_SNAPSHOT_PEERS=off only this world's, and a line when there are only others.
  Outcome Load(const SnapshotStore& store, uint64_t job, int64_t first_rank, int64_t world_size) const;
  // Marks this run (`job`) as running until ReleaseRun: every agent of the run holds a read lock
  // on DIR/.run-JOB.lock, so that another job's agent can tell that the files this run writes are
  // not a stopped run's state to resume from. FailedPrecondition names the directory, the cause and
  // the fix where the lock cannot be taken (a filesystem mounted without locks, such as Lustre
  // without -o flock): two jobs given it at the same time cannot be told apart then.
  absl::StatusOr<UniqueFd> HoldRun(uint64_t job) const;
  // Lets go of what HoldRun returned; the lock file goes with the last agent of the run.
  void ReleaseRun(UniqueFd held, uint64_t job) const;
  // One line for the files of `ranks` that another run wrote, naming the directory and the fix;
  // `outcome` says what was done with them ("not loaded").
  std::string AnotherRunsLine(std::vector<int64_t> ranks, const std::string& outcome) const;
  // Removes what a finished job leaves, as one agent of it (of global ranks `first_rank`.. of a
  // world of `world_size`): its ranks' files, the files of other world sizes whose rank maps to
  // one of its ranks (rank mod world_size), and what runs that are over left (temporaries, lock
  // files). The rest is left to the other agents: in a shared directory no agent opens every
  // node's files. A file of another run still running stays, with a line.
  struct Cleared {
    int removed = 0;
    std::vector<std::string> problems;
  };
  Cleared Clear(uint64_t job, int64_t first_rank, int ranks, int64_t world_size) const;

 private:
  explicit SnapshotDir(std::string path) : path_(std::move(path)) {}
  std::string FileOf(int64_t rank, int64_t world_size) const;
  // Loads the file of `rank` in a world of `world_size` into local rank `local_rank`'s region
  // (Load); false when there is no such file.
  bool LoadRank(const SnapshotStore& store, int local_rank, uint64_t job, int64_t rank, int64_t world_size,
                Outcome& done, std::vector<int64_t>& theirs) const;
  // The ranks of the files of each world size, ascending (one listing).
  std::map<int64_t, std::vector<int64_t>> Worlds() const;
  // Of the files of one world (`ranks`), the rank of the file each local rank of global ranks
  // `first_rank`.. of a world of `world_size` takes (Load's rule); -1: none.
  static std::vector<int64_t> Picks(const std::vector<int64_t>& ranks, int64_t first_rank, int nproc,
                                    int64_t world_size);
  // When the file of `rank` of `world_size` was written (mtime); nullopt when it is missing, not a
  // regular file, or another run's still running (IsAnotherRuns: `rank` is added to `theirs`).
  std::optional<std::pair<time_t, long>> WrittenAt(int64_t rank, int64_t world_size, uint64_t job,
                                                   std::vector<int64_t>& theirs) const;
  // Load with DTRUN_SNAPSHOT_PEERS=off: this world's files only, and a line when there are only others'.
  void LoadOwnWorldOnly(const SnapshotStore& store, uint64_t job, int64_t first_rank, int64_t world_size, Outcome& done,
                        std::vector<int64_t>& theirs) const;
  // The world Load takes its files from, and the rank of the file each local rank takes (Picks).
  struct Source {
    int64_t world = -1;  // -1: none can be read
    std::vector<int64_t> picks;
  };
  // Of `worlds`, the one whose files local ranks of global ranks `first_rank`.. (Picks) would take
  // were written last, this one's (`world_size`) on a tie.
  Source NewestWorld(const std::map<int64_t, std::vector<int64_t>>& worlds, uint64_t job, int64_t first_rank, int nproc,
                     int64_t world_size, std::vector<int64_t>& theirs) const;
  // Removes the files of `ranks` of a world of `world_size` that are local ranks of global ranks
  // `first_rank`.. (not another running run's); how many.
  int RemoveOwnFiles(const std::vector<int64_t>& ranks, uint64_t job, int64_t first_rank, int nproc,
                     int64_t world_size) const;
  // Removes the other worlds' files that the file of `written` (rank, world size) supersedes.
  void RemoveSuperseded(uint64_t job, const snapshot::SlotHeader& written) const;
  // Whether a file `writer` wrote (the job in its header; nullopt: no snapshot file) is another
  // run's, one still running (its agents hold its lock): not this run's to load, replace or
  // remove, since two jobs share the directory.
  bool IsAnotherRuns(std::optional<uint64_t> writer, uint64_t job) const;
  // Removes `file` unless another running run wrote it (IsAnotherRuns); whether it was removed.
  bool RemoveUnlessAnotherRuns(const std::string& file, uint64_t job) const;
  std::string path_;
  // The other worlds' files Load found, until superseded; shared by the copies of this object (the
  // persister's thread writes through one).
  struct OlderWorlds {
    CheckedMutex mu;
    std::map<int64_t, std::vector<int64_t>> worlds ABSL_GUARDED_BY(mu);  // world size -> ranks
    int removed ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<OlderWorlds> older_ = std::make_shared<OlderWorlds>();
};

}  // namespace dtrun

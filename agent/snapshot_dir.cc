#include "agent/snapshot_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/format_bytes.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "snapshot/snapshot_file.h"

namespace dtrun {
namespace {

const std::regex& SnapshotFileName() {
  static const std::regex name(R"(rank-(\d+)-of-(\d+)\.dtsnap)");
  return name;
}

// What Keep writes before its rename: .keep-JOB-XXXXXX.tmp, made unique by mkostemps (on shared
// storage every node's agent writes here, and in containers they all run as pid 1). Left behind
// only by an agent killed mid-write; the job in the name says whether its run still runs.
const std::regex& TemporaryName() {
  static const std::regex name(R"(\.keep-([0-9a-f]{16})-[A-Za-z0-9]{6}\.tmp)");
  return name;
}

// SnapshotDir::HoldRun's: left behind by a run whose agents were killed.
const std::regex& RunLockName() {
  static const std::regex name(R"(\.run-([0-9a-f]{16})\.lock)");
  return name;
}

absl::Status Refuse(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("--snapshot-dir ", path, ": ", why, "; give a directory of your own that other users cannot write to"));
}

// Calls `f` with the name of each entry of `dir`; never throws (an unreadable directory has none).
template <typename F>
void ForEachName(const std::string& dir, F&& f) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    f(it->path().filename().string());
  }
}

// The job that wrote the snapshot file open at `fd`, or at `path`; nullopt if it is no snapshot file.
std::optional<uint64_t> JobOfFile(int fd) {
  absl::StatusOr<uint64_t> job = snapshot::SnapshotFileJob(fd);
  return job.ok() ? std::optional(*job) : std::nullopt;
}
std::optional<uint64_t> JobOfFile(const std::string& path) {
  UniqueFd in(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  return in.valid() ? JobOfFile(in.get()) : std::nullopt;
}

std::string Hex(uint64_t job) { return absl::StrFormat("%016x", job); }

std::string RunLockOf(const std::string& dir, uint64_t job) { return absl::StrCat(dir, "/.run-", Hex(job), ".lock"); }

// Run locks are open-file-description locks on the whole file (fcntl F_OFD_*: released when the
// holder's file closes, as at its death, and kept by NFS's lock manager across hosts). Holders
// take read locks; whether any other holder is left is asked (F_OFD_GETLK) for a write lock, never
// taken, so asking cannot make a holder's own lock fail.
bool LockFile(int fd, int command, short type, struct flock* lock) {
  *lock = {};
  lock->l_type = type;
  lock->l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file
  return ::fcntl(fd, command, lock) == 0;
}

// Whether a holder other than `fd`'s own description holds a read lock on it.
bool OthersHold(int fd) {
  struct flock lock;
  return LockFile(fd, F_OFD_GETLK, F_WRLCK, &lock) && lock.l_type != F_UNLCK;
}

// Whether an agent of run `job` still holds its lock in `dir` (SnapshotDir::HoldRun).
bool RunIsLive(const std::string& dir, uint64_t job) {
  UniqueFd lock(::open(RunLockOf(dir, job).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  return lock.valid() && OthersHold(lock.get());
}

void SyncDirectory(const std::string& path) {
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.valid()) ::fsync(dir.get());
}

}  // namespace

absl::StatusOr<SnapshotDir> SnapshotDir::Open(const std::string& path) {
  if (path.empty()) return Refuse(path, "empty");
  // A directory made here is private: the snapshots in it are the job's state.
  if (::mkdir(path.c_str(), 0700) != 0 && errno == ENOENT) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    ::mkdir(path.c_str(), 0700);
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Refuse(path, absl::StrCat("cannot create it: ", strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return Refuse(path, "not a directory");
  if (st.st_uid != ::geteuid()) return Refuse(path, absl::StrCat("owned by uid ", st.st_uid));
  if (st.st_mode & S_IWOTH) return Refuse(path, "every user may write in it");
  if (::access(path.c_str(), W_OK | X_OK) != 0) return Refuse(path, absl::StrCat("not writable: ", strerror(errno)));
  return SnapshotDir(path);
}

UniqueFd SnapshotDir::HoldRun(uint64_t job) const {
  UniqueFd lock(::open(RunLockOf(path_, job).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  struct flock held;
  if (!lock.valid() || !LockFile(lock.get(), F_OFD_SETLK, F_RDLCK, &held)) return UniqueFd();
  return lock;
}

void SnapshotDir::ReleaseRun(UniqueFd held, uint64_t job) const {
  if (!held.valid()) return;
  held.Reset();
  // Asked after letting go, so that of agents ending together the last one sees no holder and
  // removes the file (asked before, each could still see the other's lock).
  const std::string file = RunLockOf(path_, job);
  UniqueFd probe(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (probe.valid() && !OthersHold(probe.get())) ::unlink(file.c_str());
}

bool SnapshotDir::IsAnotherRuns(std::optional<uint64_t> writer, uint64_t job) const {
  return writer && *writer != job && RunIsLive(path_, *writer);
}

std::string SnapshotDir::AnotherRunsLine(std::vector<int64_t> ranks, const std::string& outcome) const {
  std::sort(ranks.begin(), ranks.end());
  return absl::StrCat("the snapshot", ranks.size() == 1 ? " of rank " : "s of ranks ", absl::StrJoin(ranks, ", "),
                      " in ", path_, ranks.size() == 1 ? " is" : " are",
                      " another run's, one running at the same time as this one: two jobs share --snapshot-dir ",
                      path_, "; give each job a directory of its own (", outcome, ")");
}

std::string SnapshotDir::FileOf(int64_t rank, int64_t world_size) const {
  return absl::StrCat(path_, "/rank-", rank, "-of-", world_size, ".dtsnap");
}

void SnapshotDir::Outcome::Add(const std::vector<snapshot::SlotHeader>& headers) {
  if (headers.empty()) return;
  ++ranks;
  for (const snapshot::SlotHeader& h : headers) {
    steps.push_back(h.step);
    bytes += h.payload_bytes;
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
}

std::string SnapshotDir::Outcome::Describe() const {
  return absl::StrCat(ranks, ranks == 1 ? " rank's" : " ranks'", " snapshots of ", steps.size() == 1 ? "step " : "steps ",
                      absl::StrJoin(steps, ", "), " (", FormatBytes(bytes), ")");
}

absl::StatusOr<std::vector<snapshot::SlotHeader>> SnapshotDir::KeepRank(const SnapshotStore& store, int local_rank,
                                                                         uint64_t job, snapshot::Slots which) const {
  DT_ASSIGN_OR_RETURN(snapshot::MappedRegion region, snapshot::MappedRegion::Map(store.fd(local_rank)));
  // A name no other writer has: on shared storage the agents of other nodes keep into the same
  // directory, and in containers they all run as the same pid.
  std::string tmp = absl::StrCat(path_, "/.keep-", Hex(job), "-XXXXXX.tmp");
  UniqueFd out(::mkostemps(tmp.data(), 4, O_CLOEXEC));  // 0600, O_EXCL
  if (!out.valid()) return absl::PermissionDeniedError(absl::StrCat("cannot write in ", path_, ": ", strerror(errno)));
  absl::StatusOr<std::vector<snapshot::SlotHeader>> written = snapshot::WriteSnapshotFile(region, job, out.get(), which);
  if (written.ok() && !written->empty() && ::fdatasync(out.get()) != 0) {
    written = absl::ResourceExhaustedError(absl::StrCat("cannot write ", tmp, ": ", strerror(errno)));
  }
  // Written and on disk: the page cache need not keep it from the training's own files.
  if (written.ok()) ::posix_fadvise(out.get(), 0, 0, POSIX_FADV_DONTNEED);
  out.Reset();
  if (!written.ok() || written->empty()) {
    ::unlink(tmp.c_str());
    return written;
  }
  const snapshot::SlotHeader& newest = written->back();
  const std::string file = FileOf(newest.rank, newest.world_size);
  if (IsAnotherRuns(JobOfFile(file), job)) {
    ::unlink(tmp.c_str());
    return absl::FailedPreconditionError(AnotherRunsLine({newest.rank}, "not replaced"));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", file, ": ", strerror(error)));
  }
  SyncDirectory(path_);
  return written;
}

SnapshotDir::Outcome SnapshotDir::Keep(const SnapshotStore& store, uint64_t job) const {
  Outcome done;
  std::vector<int64_t> theirs;  // ranks whose files another run wrote: one line for all
  for (int lr = 0; lr < store.nproc(); ++lr) {
    absl::StatusOr<std::vector<snapshot::SlotHeader>> written = KeepRank(store, lr, job, snapshot::Slots::kBoth);
    if (written.ok()) {
      done.Add(*written);
    } else if (std::optional<snapshot::SlotHeader> newest = store.Newest(lr);
               absl::IsFailedPrecondition(written.status()) && newest) {
      theirs.push_back(newest->rank);
    } else {
      done.problems.push_back(absl::StrCat("local rank ", lr, "'s snapshots were not kept: ", written.status().message()));
    }
  }
  if (!theirs.empty()) done.problems.push_back(AnotherRunsLine(theirs, "not replaced"));
  return done;
}

SnapshotDir::Outcome SnapshotDir::Load(const SnapshotStore& store, uint64_t job, int64_t first_rank,
                                       int64_t world_size) const {
  Outcome done;
  bool found = false;
  std::vector<int64_t> theirs;
  absl::Cleanup say_theirs = [&] {
    if (!theirs.empty()) done.problems.push_back(AnotherRunsLine(theirs, "not loaded"));
  };
  for (int lr = 0; lr < store.nproc(); ++lr) {
    const int64_t rank = first_rank + lr;
    const std::string file = FileOf(rank, world_size);
    UniqueFd in(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!in.valid()) {
      if (errno != ENOENT) done.problems.push_back(absl::StrCat("cannot read ", file, ": ", strerror(errno)));
      continue;
    }
    found = true;
    if (IsAnotherRuns(JobOfFile(in.get()), job)) {  // the file open already, not opened again
      theirs.push_back(rank);
      continue;
    }
    absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(store.fd(lr));
    if (!region.ok()) continue;
    absl::StatusOr<std::vector<snapshot::SlotHeader>> placed =
        snapshot::ReadSnapshotFile(in.get(), job, rank, world_size, *region);
    if (placed.ok()) {
      done.Add(*placed);
      continue;
    }
    done.problems.push_back(absl::StrCat(file, " not used: ", placed.status().message()));
    // A record placed before the damage stays: it counts.
    std::vector<snapshot::SlotHeader> whole;
    for (int s = 0; s < snapshot::kSlots; ++s) {
      absl::StatusOr<snapshot::SlotHeader> h = region->Header(s);
      if (h.ok() && h->job == job) whole.push_back(*h);
    }
    done.Add(whole);
  }
  if (found) return done;
  // Nothing of this world: say so when the directory holds another's (nproc or nodes changed).
  std::string other;
  ForEachName(path_, [&](const std::string& name) {
    std::smatch m;
    if (other.empty() && std::regex_match(name, m, SnapshotFileName()) && m[2] != std::to_string(world_size)) {
      other = m[2];
    }
  });
  if (!other.empty()) {
    done.problems.push_back(
        absl::StrCat(path_, " holds snapshots of a world of ", other, " ranks, not ", world_size, ": not used"));
  }
  return done;
}

SnapshotDir::Cleared SnapshotDir::Clear(uint64_t job, int64_t first_rank, int ranks, int64_t world_size) const {
  Cleared done;
  std::vector<int64_t> theirs;
  // What a run that is over left: its temporaries (an agent killed mid-write) and lock file.
  auto over = [&](const std::string& hex) {
    const uint64_t run = std::stoull(hex, nullptr, 16);
    return run == job || !RunIsLive(path_, run);
  };
  ForEachName(path_, [&](const std::string& name) {
    const std::string file = path_ + "/" + name;
    std::smatch m;
    if (std::regex_match(name, m, TemporaryName()) && over(m[1])) ::unlink(file.c_str());
    if (std::regex_match(name, m, RunLockName()) && m[1] != Hex(job) && over(m[1])) ::unlink(file.c_str());
    if (!std::regex_match(name, m, SnapshotFileName())) return;
    const int64_t rank = std::stoll(m[1]);
    // The job's other ranks are their own agents' to remove: each file is opened by one agent, not all.
    const bool own = rank >= first_rank && rank < first_rank + ranks;
    if (std::stoll(m[2]) == world_size && !own) return;
    if (IsAnotherRuns(JobOfFile(file), job)) {
      theirs.push_back(rank);
    } else if (::unlink(file.c_str()) == 0) {
      ++done.removed;
    }
  });
  if (!theirs.empty()) done.problems.push_back(AnotherRunsLine(theirs, "left there"));
  return done;
}

}  // namespace dtrun

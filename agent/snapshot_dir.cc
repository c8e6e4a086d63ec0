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
#include <map>
#include <optional>
#include <regex>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "base/format_bytes.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "snapshot/peer_restores.h"
#include "snapshot/snapshot_file.h"

namespace dtrun {
namespace {

struct RankOfWorld {
  int64_t rank;
  int64_t world;
};

// The rank and world size in a snapshot file's name, rank-R-of-W.dtsnap (digits only); nullopt for
// any other name, or a number past int64's range. Not a regex: every agent reads every name in the
// directory as it starts, which on a shared one of 1,000 nodes of 8 ranks is 8,000 names (std::regex
// took 50 ms for them).
std::optional<RankOfWorld> ParseSnapshotName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "rank-") || !absl::ConsumeSuffix(&name, ".dtsnap")) return std::nullopt;
  const size_t of = name.find("-of-");
  if (of == absl::string_view::npos) return std::nullopt;
  auto count = [](absl::string_view digits) -> std::optional<int64_t> {
    int64_t n = 0;
    if (digits.empty() || !absl::c_all_of(digits, absl::ascii_isdigit) || !absl::SimpleAtoi(digits, &n)) {
      return std::nullopt;
    }
    return n;
  };
  std::optional<int64_t> rank = count(name.substr(0, of)), world = count(name.substr(of + 4));
  if (!rank || !world) return std::nullopt;
  return RankOfWorld{*rank, *world};
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

// Whether the agent of global ranks [first, first + ranks) in a world of `world_size` answers for
// the file of `rank` of another world: the one holding rank mod world_size. So each such file is
// opened by one agent, not by every agent of a shared directory.
bool AnswersFor(int64_t rank, int64_t first, int ranks, int64_t world_size) {
  const int64_t mapped = rank % world_size;
  return mapped >= first && mapped < first + ranks;
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

absl::StatusOr<UniqueFd> SnapshotDir::HoldRun(uint64_t job) const {
  const std::string file = RunLockOf(path_, job);
  UniqueFd lock(::open(file.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  struct flock held;
  if (lock.valid() && LockFile(lock.get(), F_OFD_SETLK, F_RDLCK, &held)) return lock;
  const int error = errno;
  return absl::FailedPreconditionError(
      absl::StrCat("--snapshot-dir ", path_, ": cannot lock ", file, " (", strerror(error),
                   "): a second job given this directory while this one runs would resume from, or replace, this job's "
                   "snapshots unnoticed; give each job a directory of its own",
                   error == ENOLCK || error == ENOSYS || error == EOPNOTSUPP
                       ? " (the filesystem takes no locks: on Lustre, mount it with -o flock)"
                       : ""));
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

bool SnapshotDir::RemoveUnlessAnotherRuns(const std::string& file, uint64_t job) const {
  return !IsAnotherRuns(JobOfFile(file), job) && ::unlink(file.c_str()) == 0;
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

std::map<int64_t, std::vector<int64_t>> SnapshotDir::Worlds() const {
  std::map<int64_t, std::vector<int64_t>> worlds;
  ForEachName(path_, [&](const std::string& name) {
    std::optional<RankOfWorld> file = ParseSnapshotName(name);
    if (file && file->rank < file->world) worlds[file->world].push_back(file->rank);
  });
  for (auto& [world, ranks] : worlds) std::sort(ranks.begin(), ranks.end());
  return worlds;
}

// Each rank takes its own rank's file, else the first whose rank maps to it (rank mod this world's
// size: a node-local directory holds its node's old ranks), so that each file is taken by one rank
// at most, job-wide, and the job-wide choice weighs each old rank's state once, as the old world
// would have. A rank left without one (the world grew) receives a holder's copy.
std::vector<int64_t> SnapshotDir::Picks(const std::vector<int64_t>& ranks, int64_t first_rank, int nproc,
                                        int64_t world_size) {
  std::vector<int64_t> picks(nproc, -1);
  for (int lr = 0; lr < nproc; ++lr) {
    const int64_t rank = first_rank + lr;
    if (std::binary_search(ranks.begin(), ranks.end(), rank)) {
      picks[lr] = rank;
      continue;
    }
    auto mapped = std::find_if(ranks.begin(), ranks.end(), [&](int64_t r) { return r % world_size == rank; });
    if (mapped != ranks.end()) picks[lr] = *mapped;
  }
  return picks;
}

std::optional<std::pair<time_t, long>> SnapshotDir::WrittenAt(int64_t rank, int64_t world_size, uint64_t job,
                                                              std::vector<int64_t>& theirs) const {
  UniqueFd in(::open(FileOf(rank, world_size).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st;
  if (!in.valid() || ::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (IsAnotherRuns(JobOfFile(in.get()), job)) {  // not this run's to load
    theirs.push_back(rank);
    return std::nullopt;
  }
  return std::pair<time_t, long>(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
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
  RemoveSuperseded(job, newest);
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
  CheckedMutexLock lock(&older_->mu);
  done.superseded = older_->removed;
  return done;
}

void SnapshotDir::RemoveSuperseded(uint64_t job, const snapshot::SlotHeader& written) const {
  CheckedMutexLock lock(&older_->mu);
  for (auto& [world, ranks] : older_->worlds) {
    if (world == written.world_size) continue;
    // The older world's files that the rank just written answers for (their rank mod its world size).
    for (auto it = ranks.begin(); it != ranks.end();) {
      if (!AnswersFor(*it, written.rank, 1, written.world_size)) {
        ++it;
        continue;
      }
      const std::string file = FileOf(*it, world);
      if (RemoveUnlessAnotherRuns(file, job)) ++older_->removed;
      it = ranks.erase(it);
    }
  }
}

bool SnapshotDir::LoadRank(const SnapshotStore& store, int local_rank, uint64_t job, int64_t rank,
                           int64_t world_size, Outcome& done, std::vector<int64_t>& theirs) const {
  const std::string file = FileOf(rank, world_size);
  UniqueFd in(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!in.valid()) {
    if (errno != ENOENT) done.problems.push_back(absl::StrCat("cannot read ", file, ": ", strerror(errno)));
    return false;
  }
  if (IsAnotherRuns(JobOfFile(in.get()), job)) {  // the file open already, not opened again
    theirs.push_back(rank);
    return true;
  }
  absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(store.fd(local_rank));
  if (!region.ok()) return true;
  absl::StatusOr<std::vector<snapshot::SlotHeader>> placed =
      snapshot::ReadSnapshotFile(in.get(), job, rank, world_size, *region);
  if (placed.ok()) {
    done.Add(*placed);
    return true;
  }
  done.problems.push_back(absl::StrCat(file, " not used: ", placed.status().message()));
  // A record placed before the damage stays: it counts.
  std::vector<snapshot::SlotHeader> whole;
  for (int s = 0; s < snapshot::kSlots; ++s) {
    absl::StatusOr<snapshot::SlotHeader> h = region->Header(s);
    if (h.ok() && h->job == job) whole.push_back(*h);
  }
  done.Add(whole);
  return true;
}

void SnapshotDir::LoadOwnWorldOnly(const SnapshotStore& store, uint64_t job, int64_t first_rank, int64_t world_size,
                                   Outcome& done, std::vector<int64_t>& theirs) const {
  bool found = false;
  for (int lr = 0; lr < store.nproc(); ++lr) {
    found |= LoadRank(store, lr, job, first_rank + lr, world_size, done, theirs);
  }
  if (found) return;
  std::map<int64_t, std::vector<int64_t>> others = Worlds();
  others.erase(world_size);
  if (others.empty()) return;
  done.problems.push_back(absl::StrCat(path_, " holds snapshots of a world of ", others.rbegin()->first, " ranks, not ",
                                       world_size,
                                       ": not used (DTRUN_SNAPSHOT_PEERS=off: each rank restores only its own)"));
}

SnapshotDir::Source SnapshotDir::NewestWorld(const std::map<int64_t, std::vector<int64_t>>& worlds, uint64_t job,
                                             int64_t first_rank, int nproc, int64_t world_size,
                                             std::vector<int64_t>& theirs) const {
  Source newest;
  std::pair<time_t, long> newest_at;
  for (const auto& [world, ranks] : worlds) {
    std::vector<int64_t> picks = Picks(ranks, first_rank, nproc, world_size);
    for (int64_t rank : picks) {
      if (rank < 0) continue;
      std::optional<std::pair<time_t, long>> at = WrittenAt(rank, world, job, theirs);
      if (!at) continue;
      // Ties go to this world's own files.
      if (newest.world < 0 || *at > newest_at || (*at == newest_at && world == world_size)) {
        newest = {world, picks};
        newest_at = *at;
      }
    }
  }
  return newest;
}

int SnapshotDir::RemoveOwnFiles(const std::vector<int64_t>& ranks, uint64_t job, int64_t first_rank, int nproc,
                                int64_t world_size) const {
  int removed = 0;
  for (int64_t rank : ranks) {
    if (rank < first_rank || rank >= first_rank + nproc) continue;
    if (RemoveUnlessAnotherRuns(FileOf(rank, world_size), job)) ++removed;
  }
  return removed;
}

SnapshotDir::Outcome SnapshotDir::Load(const SnapshotStore& store, uint64_t job, int64_t first_rank,
                                       int64_t world_size) const {
  Outcome done;
  std::vector<int64_t> theirs;
  absl::Cleanup say_theirs = [&] {
    std::sort(theirs.begin(), theirs.end());
    theirs.erase(std::unique(theirs.begin(), theirs.end()), theirs.end());
    if (!theirs.empty()) done.problems.push_back(AnotherRunsLine(theirs, "not loaded"));
  };
  if (!snapshot::PeerRestoresAllowed()) {
    LoadOwnWorldOnly(store, job, first_rank, world_size, done, theirs);
    return done;
  }
  // The ranks are replicas (snapshot/peer_restores.h), so the files of any world size will do, and
  // those written last hold the newest state. This world's own are not preferred for being its own:
  // the persister copies rank after rank, and a launcher SIGKILLed in the middle of a pass of the
  // run after a world change leaves the new world's files for some ranks beside the older world's
  // for the rest; whichever world the next run has, the state written last is the one to go on from.
  const int nproc = store.nproc();
  const std::map<int64_t, std::vector<int64_t>> worlds = Worlds();
  const Source source = NewestWorld(worlds, job, first_rank, nproc, world_size, theirs);
  const int64_t from = source.world;
  {
    // Whichever is loaded, the state this run keeps will be newer than the other worlds' files.
    CheckedMutexLock lock(&older_->mu);
    older_->worlds = worlds;
    older_->worlds.erase(world_size);
  }
  if (from < 0) {
    // Nothing to load; this world's files that cannot be read are named.
    for (int lr = 0; lr < nproc; ++lr) LoadRank(store, lr, job, first_rank + lr, world_size, done, theirs);
    return done;
  }
  for (int lr = 0; lr < nproc; ++lr) {
    if (source.picks[lr] >= 0) LoadRank(store, lr, job, source.picks[lr], from, done, theirs);
  }
  if (done.ranks == 0 || from == world_size) return done;
  done.taken_by_world = from;
  // These ranks' own files of this world are older than the state just loaded. Left in place, a
  // run killed after copying some of its ranks would leave them beside its fresh files, in the
  // same world, and at the next restore they would outvote them (the newest step that half the
  // holders hold) and take the job back to the run before the one that loaded them.
  if (auto own = worlds.find(world_size); own != worlds.end()) {
    done.superseded = RemoveOwnFiles(own->second, job, first_rank, nproc, world_size);
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
    std::optional<RankOfWorld> snapshot = ParseSnapshotName(name);
    if (!snapshot) return;
    // Each file is opened by one agent, not all: this world's other ranks are their own agents' to
    // remove, another world's go to the agent of the rank they map to.
    const bool own = snapshot->world == world_size ? snapshot->rank >= first_rank && snapshot->rank < first_rank + ranks
                                                   : AnswersFor(snapshot->rank, first_rank, ranks, world_size);
    if (!own) return;
    if (IsAnotherRuns(JobOfFile(file), job)) {
      theirs.push_back(snapshot->rank);
    } else if (::unlink(file.c_str()) == 0) {
      ++done.removed;
    }
  });
  if (!theirs.empty()) done.problems.push_back(AnotherRunsLine(theirs, "left there"));
  return done;
}

}  // namespace dtrun

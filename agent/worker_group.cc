#include "agent/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/stderr_error.h"
#include "agent/worker_env.h"
#include "base/host_name.h"
#include "base/launch_layout.h"
#include "base/status_macros.h"
#include "base/unix_time.h"

namespace dtrun {
namespace {

absl::StatusOr<UniqueFd> OpenLog(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write log file ", path, ": ",
                                                    strerror(errno), "; check --log-dir"));
  }
  return fd;
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create directory ", dir, ": ", ec.message(), "; check --log-dir"));
  }
  return absl::OkStatus();
}

// --duplicate-*-filters: the file the attempt's workers share for one stream (null: none asked).
absl::StatusOr<std::shared_ptr<UniqueFd>> OpenFilteredLog(const std::vector<std::string>& filters,
                                                          const AttemptPaths& p, int64_t round, const char* name) {
  if (filters.empty() || p.log_root.empty()) return std::shared_ptr<UniqueFd>();
  const std::string dir = launch_layout::AttemptDir(p.log_root, round);
  DT_RETURN_IF_ERROR(MakeDirs(dir));
  DT_ASSIGN_OR_RETURN(UniqueFd fd, OpenLog(absl::StrCat(dir, "/", name)));
  return std::make_shared<UniqueFd>(std::move(fd));
}

// Builds the relay for one stream of one worker.
absl::StatusOr<std::unique_ptr<OutputRelay>> MakeRelay(const AgentOptions& o, const AttemptPaths& p,
                                                       const std::string& rank_dir, int local_rank, int global_rank,
                                                       StreamMask bit, const Consoles& consoles,
                                                       const std::shared_ptr<UniqueFd>& filtered) {
  StreamMask redirect = o.redirects.count(local_rank) ? o.redirects.at(local_rank) : 0;
  bool shown = !(redirect & bit) && (!o.console_ranks || o.console_ranks->count(local_rank));
  // With a log root every stream is also written to its file, so --tee needs nothing more here.
  UniqueFd file;
  if (!p.log_root.empty()) {
    DT_ASSIGN_OR_RETURN(file, OpenLog(absl::StrCat(rank_dir, bit == kStdoutBit ? "/stdout.log" : "/stderr.log")));
  }
  std::shared_ptr<Console> console = !shown ? nullptr : bit == kStdoutBit ? consoles.out : consoles.err;
  std::string prefix = ExpandPrefixTemplate(o.log_line_prefix_template, o.role, global_rank, local_rank);
  auto relay = std::make_unique<OutputRelay>(prefix, console, std::move(file));
  if (filtered) {
    relay->DuplicateMatching(std::make_unique<LineFilterLog>(
        bit == kStdoutBit ? o.duplicate_stdout_filters : o.duplicate_stderr_filters, std::move(prefix), filtered));
  }
  return relay;
}

// The identity of local rank `lr` in the round `layout` describes.
WorkerIdentity IdentityOf(const AttemptPaths& paths, const rdzv::Assignment& layout, const WorkerGroup::Io& io,
                          int lr) {
  WorkerIdentity id;
  id.local_rank = lr;
  id.global_rank = layout.rank_offset + lr;
  id.world_size = layout.world_size;
  id.restart_count = static_cast<int>(layout.round);
  id.group_rank = layout.group_rank;
  id.group_world_size = layout.group_world_size;
  id.master_addr = layout.master_addr;
  id.master_port = layout.master_port;
  const std::string error_dir = launch_layout::RankDir(paths.error_root, layout.round, lr);
  id.error_file = launch_layout::ErrorFile(error_dir);
  id.stacks_file = launch_layout::StacksFile(error_dir);
  id.log_dir = paths.log_root.empty() ? "" : launch_layout::RankDir(paths.log_root, layout.round, lr);
  if (lr < static_cast<int>(io.snapshot_fds.size())) id.snapshot_fd = io.snapshot_fds[lr];
  if (lr < static_cast<int>(io.replica_fds.size())) id.replica_fd = io.replica_fds[lr];
  return id;
}

SpawnRequest RequestFor(const AgentOptions& o, const std::map<std::string, std::string>& base_env,
                        const WorkerIdentity& id, bool pipe_stdin) {
  SpawnRequest req;
  req.executable = o.executable;
  req.argv = o.argv;
  if (o.local_rank_arg) {
    size_t at = std::min(o.script_args_at, req.argv.size());
    req.argv.insert(req.argv.begin() + static_cast<long>(at), absl::StrCat(*o.local_rank_arg, "=", id.local_rank));
  }
  req.env = BuildWorkerEnv(base_env, o, id);
  req.pipe_stdin = pipe_stdin;
  if (id.local_rank < static_cast<int>(o.worker_cpus.size())) req.cpus = o.worker_cpus[id.local_rank];
  if (id.snapshot_fd >= 0) req.inherit_fds.push_back(id.snapshot_fd);
  if (id.replica_fd >= 0) req.inherit_fds.push_back(id.replica_fd);
  return req;
}

}  // namespace

std::vector<SpawnRequest> WorkerGroup::SpawnRequests(const AgentOptions& o,
                                                     const std::map<std::string, std::string>& base_env,
                                                     const AttemptPaths& paths, const rdzv::Assignment& layout,
                                                     const Io& io) {
  std::vector<SpawnRequest> out;
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    out.push_back(RequestFor(o, base_env, IdentityOf(paths, layout, io, lr), io.pipe_stdin));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    const AgentOptions& o, const std::map<std::string, std::string>& base_env,
    const AttemptPaths& paths, const rdzv::Assignment& layout, const Io& io) {
  std::unique_ptr<WorkerGroup> group(new WorkerGroup());
  group->workers_.reserve(o.nproc_per_node);
  group->oom_ = io.oom;
  if (io.oom) group->oom_at_start_ = io.oom->Read();
  DT_ASSIGN_OR_RETURN(std::shared_ptr<UniqueFd> filtered_out,
                      OpenFilteredLog(o.duplicate_stdout_filters, paths, layout.round, "filtered_stdout.log"));
  DT_ASSIGN_OR_RETURN(std::shared_ptr<UniqueFd> filtered_err,
                      OpenFilteredLog(o.duplicate_stderr_filters, paths, layout.round, "filtered_stderr.log"));
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    const WorkerIdentity id = IdentityOf(paths, layout, io, lr);
    const std::string error_dir = std::filesystem::path(id.error_file).parent_path();
    DT_RETURN_IF_ERROR(MakeDirs(error_dir));
    if (!id.log_dir.empty()) {
      DT_RETURN_IF_ERROR(MakeDirs(id.log_dir));
    }
    SpawnRequest req = RequestFor(o, base_env, id, io.pipe_stdin);
    DT_ASSIGN_OR_RETURN(std::unique_ptr<OutputRelay> out,
                        MakeRelay(o, paths, id.log_dir, lr, id.global_rank, kStdoutBit, io.consoles, filtered_out));
    DT_ASSIGN_OR_RETURN(std::unique_ptr<OutputRelay> err,
                        MakeRelay(o, paths, id.log_dir, lr, id.global_rank, kStderrBit, io.consoles, filtered_err));
    err->KeepTail(kStderrTailBytes);  // the error of a worker that writes no error file
    std::optional<ChildProcess> parked = io.warm ? io.warm->Release(lr, req) : std::nullopt;
    DT_ASSIGN_OR_RETURN(ChildProcess proc, parked ? std::move(*parked) : ChildProcess::Spawn(req));
    group->error_files_[lr] = id.error_file;
    group->workers_.push_back(
        Worker{lr, id.global_rank, std::move(proc), std::move(out), std::move(err), error_dir, parked.has_value()});
    group->requests_.push_back(std::move(req));
  }
  return group;
}

bool WorkerGroup::OnExit(pid_t pid, int wait_status) {
  for (Worker& w : workers_) {
    if (w.process.pid() != pid || !w.process.running()) continue;
    w.process.MarkExited(wait_status);
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) return true;
    WorkerFailure f;
    f.host = LocalHostName();
    f.global_rank = w.global_rank;
    f.local_rank = w.local_rank;
    f.pid = pid;
    f.exit_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 0;
    f.signal = WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0;
    // Compared with error files' modification times for the root cause: by their clock.
    f.time_unix_ms = UnixMillisNowAsFilesSeeIt();
    f.error_file = error_files_[w.local_rank];
    ReadErrorFile(f);
    // An exit caused by our own stop signal is a consequence, not a failure; a worker that
    // failed on its own meanwhile (an error file, an exit code of its own) is one, as torchrun
    // lists it under "Other failures".
    const bool own_error = !f.message.empty() || !f.traceback.empty();
    if (StoppedByUs(wait_status) && !own_error) return true;
    if (!own_error) ReadErrorFromStderr(w, f);
    NameOomKills(f);
    failures_.push_back(std::move(f));
    return true;
  }
  return false;
}

void WorkerGroup::ReadErrorFromStderr(Worker& w, WorkerFailure& f) {
  // The worker is gone, so all it wrote is in the pipe: read now, before the failure is reported.
  if (w.process.stderr_fd().valid()) w.err->DrainFrom(w.process.stderr_fd().get());
  std::optional<StderrError> found = FindErrorInStderr(w.err->tail(), w.err->tail_cut(), f.signal > 0);
  if (!found) return;
  f.message = std::move(found->message);
  f.traceback = std::move(found->traceback);
  f.error_file.clear();  // not from an error file: the summary says <N/A>
}

void WorkerGroup::NameOomKills(WorkerFailure& f) const {
  if (oom_ == nullptr) return;
  const OomCounts now = oom_->Read();
  const bool silent = f.message.empty() && f.traceback.empty();
  if (f.signal == SIGKILL && silent) {
    std::optional<std::string> why = oom_->ExplainKill(oom_at_start_, now);
    if (!why) return;
    f.kind = rdzv::FailureKind::kOomKilled;
    f.message = std::move(*why);
    f.error_file.clear();  // the worker had no chance to write one
    return;
  }
  // The failure may be a consequence: PyTorch's "DataLoader worker (pid N) is killed by signal".
  std::optional<std::string> beside = oom_->NoteKillsBeside(oom_at_start_, now);
  if (!beside) return;
  if (silent) f.error_file.clear();  // the note is dtrun's, not the worker's
  std::string& shown = f.traceback.empty() ? f.message : f.traceback;  // what the summary prints
  absl::StrAppend(&shown, shown.empty() ? "" : "\n", *beside);
}

bool WorkerGroup::StoppedByUs(int wait_status) const {
  if (signals_sent_.empty()) return false;
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return sig == SIGKILL || signals_sent_.count(sig);
  }
  // Shells and wrappers that catch the signal exit with 128 + its number.
  int code = WEXITSTATUS(wait_status);
  return code > 128 && signals_sent_.count(code - 128);
}

int WorkerGroup::LocalRankOf(pid_t pid) const {
  const pid_t group = ::getpgid(pid);  // each worker leads its own process group
  for (const Worker& w : workers_) {
    if (w.process.running() && (w.process.pid() == pid || w.process.pid() == group)) return w.local_rank;
  }
  return -1;
}

bool WorkerGroup::all_exited() const {
  for (const Worker& w : workers_) {
    if (w.process.running()) return false;
  }
  return true;
}

bool WorkerGroup::all_succeeded() const { return all_exited() && failures_.empty(); }

void WorkerGroup::SignalAll(int signo) {
  signals_sent_.insert(signo);
  for (Worker& w : workers_) w.process.SignalGroup(signo);
}

void WorkerGroup::DrainAndCloseOutputs() {
  for (Worker& w : workers_) {
    if (w.process.stdout_fd().valid()) w.out->DrainFrom(w.process.stdout_fd().get());
    if (w.process.stderr_fd().valid()) w.err->DrainFrom(w.process.stderr_fd().get());
    w.out->Flush();
    w.err->Flush();
    w.process.stdout_fd().Reset();
    w.process.stderr_fd().Reset();
  }
}

}  // namespace dtrun

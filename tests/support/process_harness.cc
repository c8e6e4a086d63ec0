#include "tests/support/process_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "agent/worker_env.h"
#include "base/executable.h"
#include "base/process_table.h"
#include "base/remove_tree.h"
#include "gtest/gtest.h"

extern char** environ;

namespace dtrun::testing {

namespace {

// What the programs a test starts leave in $TMPDIR (dtrun's log directories without --log-dir,
// Python's temporary files) goes into one directory that this test process removes at exit.
const std::string& ChildTmpDir() {
  static const std::string dir = MakeTempDir();
  return dir;
}

}  // namespace

Harness::Harness(std::vector<std::string> argv, std::map<std::string, std::string> env, bool pipe_stdin) {
  std::map<std::string, std::string> merged = EnvironToMap(environ);
  merged["TMPDIR"] = ChildTmpDir();
  for (auto& [k, v] : env) merged[k] = v;
  SpawnRequest req;
  absl::StatusOr<std::string> exe = FindExecutable(argv[0]);
  req.executable = exe.ok() ? *exe : argv[0];
  req.argv = std::move(argv);
  for (auto& [k, v] : merged) req.env.push_back(k + "=" + v);
  req.pipe_stdin = pipe_stdin;
  absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(req);
  if (!p.ok()) {
    err_ = std::string(p.status().message()) + "\n";  // e.g. the program is not installed
    return;
  }
  proc_.emplace(std::move(*p));
}

bool Harness::WriteStdin(const std::string& bytes) {
  if (!proc_ || !proc_->stdin_fd().valid()) return false;
  const int fd = proc_->stdin_fd().get();
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a test's few lines: wait for room
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void Harness::CloseStdin() {
  if (proc_) proc_->stdin_fd().Reset();
}

bool Harness::Pump(std::chrono::steady_clock::time_point deadline) {
  if (!proc_) return false;
  UniqueFd* fds[2] = {&proc_->stdout_fd(), &proc_->stderr_fd()};
  std::string* bufs[2] = {&out_, &err_};
  std::vector<pollfd> pfds;
  std::vector<int> which;
  for (int i = 0; i < 2; ++i) {
    if (fds[i]->valid() && (i == 1 || read_stdout_)) {
      pfds.push_back({fds[i]->get(), POLLIN, 0});
      which.push_back(i);
    }
  }
  if (pfds.empty()) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  if (::poll(pfds.data(), pfds.size(), static_cast<int>(left.count())) <= 0) return false;
  for (size_t k = 0; k < pfds.size(); ++k) {
    if (!pfds[k].revents) continue;
    char buf[65536];
    ssize_t n = ::read(pfds[k].fd, buf, sizeof(buf));
    if (n > 0) {
      bufs[which[k]]->append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      fds[which[k]]->Reset();
    }
  }
  return true;
}

bool Harness::WaitForOutput(const std::string& needle, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (all().find(needle) == std::string::npos) {
    if (!Pump(deadline)) return all().find(needle) != std::string::npos;
  }
  return true;
}

std::optional<int> Harness::Wait(std::chrono::milliseconds timeout) {
  if (!proc_) return 127;  // could not start: as a shell reports a missing command
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Pump(deadline)) {
  }
  if (!WaitForPidExit(proc_->pid(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                        deadline - std::chrono::steady_clock::now()))) {
    return std::nullopt;
  }
  int status = 0;
  ::waitpid(proc_->pid(), &status, 0);
  proc_->MarkExited(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string DtrunBinary() { return DTRUN_BIN_DIR "/dtrun"; }
std::string BinDir() { return DTRUN_BIN_DIR; }
std::string SourceDir() { return DTRUN_SOURCE_DIR; }

std::optional<std::string> TorchPython() {
  const char* env = std::getenv("PYTHON_EXEC");
  std::string py = env && *env ? env : "/usr/bin/python3";
  auto [rc, out] = RunToEnd({py, "-c", "import torch"});
  if (rc != 0) return std::nullopt;
  return py;
}

bool WaitForPidExit(pid_t pid, std::chrono::milliseconds timeout) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return true;  // already gone
  pollfd p{fd, POLLIN, 0};
  int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, timeout.count())));
  ::close(fd);
  return n > 0;
}

std::pair<int, std::string> RunToEnd(std::vector<std::string> argv,
                                     std::map<std::string, std::string> env) {
  Harness h(std::move(argv), std::move(env));
  std::optional<int> rc = h.Wait();
  return {rc.value_or(-1), h.all()};
}

std::string Worker(const std::string& name) { return SourceDir() + "/tests/integration/workers/" + name; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> EventsOfKind(const std::string& events_file, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(ReadText(events_file));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == kind) out.push_back(e);
  }
  return out;
}

namespace {

// The test process's temporary dirs, removed when it exits (a whole suite leaves gigabytes of
// checkpoints and datasets otherwise). DTRUN_KEEP_TEST_DIRS=1 keeps them for a post-mortem.
std::vector<std::string>& TempDirs() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

void RemoveTempDirs() {
  const char* keep = std::getenv("DTRUN_KEEP_TEST_DIRS");
  if (keep && *keep && std::string(keep) != "0") return;
  // Not std::filesystem::remove_all: in a test that links pip's LibTorch it is libtorch.so's copy,
  // which crashed at exit (base/remove_tree.h).
  for (const std::string& dir : TempDirs()) RemoveTree(dir);
}

}  // namespace

std::string MakeTempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dtrun_test_XXXXXX";
  char* dir = ::mkdtemp(tmpl.data());
  if (!dir) return "/tmp";
  if (TempDirs().empty()) std::atexit(RemoveTempDirs);
  TempDirs().push_back(dir);
  return dir;
}

std::string MakeDemoDataset(const std::vector<std::string>& make_demo_args) {
  const std::string dir = MakeTempDir() + "/demo";
  std::vector<std::string> argv = {BinDir() + "/dtdata", "make-demo", dir};
  argv.insert(argv.end(), make_demo_args.begin(), make_demo_args.end());
  auto [rc, out] = RunToEnd(argv);
  EXPECT_EQ(rc, 0) << out;
  return dir;
}

std::string MakeRatings(int users, int items) {
  const std::string path = MakeTempDir() + "/ratings.csv";
  auto [rc, out] = RunToEnd({BinDir() + "/dtdata", "make-ratings", path, "--users", std::to_string(users), "--items",
                             std::to_string(items)});
  EXPECT_EQ(rc, 0) << out;
  return path;
}

std::pair<int, std::string> RunRecsysUnderDtrun(const std::string& dir, const std::string& ratings,
                                                const std::string& name, const std::vector<std::string>& dtrun_flags,
                                                std::map<std::string, std::string> env) {
  env.emplace("OMP_NUM_THREADS", "1");
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "3", "--max-restarts", "1"};
  argv.insert(argv.end(), dtrun_flags.begin(), dtrun_flags.end());
  const std::vector<std::string> trainer = {BinDir() + "/train_recsys", ratings, "--output-dir", dir + "/" + name,
                                           "--epochs", "2", "-b", "64", "-p", "1000", "--save-every-minutes", "1000",
                                           "--no-tensorboard"};
  argv.insert(argv.end(), trainer.begin(), trainer.end());
  return RunToEnd(argv, env);
}

std::string StepsAndDigest(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(R"((\d+) optimizer steps, parameter digest ([0-9a-f]{16}))"))
             ? m[1].str() + "/" + m[2].str()
             : "";
}

std::string TinyImageDataset() {
  static const std::string dir = MakeDemoDataset({"--train-per-class", "24", "--val-per-class", "8", "--size", "64"});
  return dir;
}

bool BinaryBuilt(const std::string& name) { return std::filesystem::exists(BinDir() + "/" + name); }

pid_t WorkerOf(pid_t launcher, int rank) {
  for (const ProcessEntry& p : FindProcessesWithEnv("DTRUN_LAUNCH_ID", std::nullopt, {"RANK", "DTRUN_PARK_FD"})) {
    if (!p.env.count("RANK") || p.env.at("RANK") != std::to_string(rank) || p.ppid != launcher) continue;
    if (p.env.count("DTRUN_PARK_FD")) continue;  // a warm worker still parked (worker/warm_start.h)
    return p.pid;
  }
  return 0;
}

}  // namespace dtrun::testing

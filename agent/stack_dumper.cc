#include "agent/stack_dumper.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/executable.h"
#include "base/process_table.h"
#include "base/unique_fd.h"

extern char** environ;

namespace dtrun {
namespace {

// eu-stack reads a process in well under a second; gdb on a large process takes a few.
constexpr std::chrono::seconds kCollectionLimit{10};
constexpr std::chrono::milliseconds kRecheck{20};

off_t SizeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// Runs the stack tool on `pid` with its output in `file`; returns its pid (0 on failure).
pid_t SpawnTool(const std::string& tool, pid_t pid, const std::string& file) {
  UniqueFd out(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out.valid()) return 0;
  std::string target = absl::StrCat(pid);
  std::vector<std::string> args;
  if (absl::EndsWith(tool, "eu-stack")) {
    args = {tool, "-p", target};
  } else {
    args = {tool, "-p", target, "-batch", "-nx", "-ex", "thread apply all bt"};
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.get(), STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the agent blocks SIGCHLD and its handled signals
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t child = 0;
  int rc = ::posix_spawn(&child, tool.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? child : 0;
}

// For a process in D state: each thread's state, wait channel and (where readable: root)
// kernel stack.
void WriteKernelWaits(pid_t pid, const std::string& file) {
  UniqueFd out(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!out.valid()) return;
  std::string text = absl::StrCat("pid ", pid, " is in uninterruptible sleep (D state); user-space stacks cannot "
                                  "be read until it wakes. Threads (kernel side):\n");
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    const std::string tid = task.path().filename().string();
    std::ifstream stack(task.path() / "stack");
    std::stringstream kernel;
    kernel << stack.rdbuf();
    absl::StrAppend(&text, "thread ", tid, ": wchan ", ReadProcFile(pid, absl::StrCat("task/", tid, "/wchan")), "\n",
                    kernel.str());
  }
  WriteAll(out.get(), text.data(), text.size());
}

}  // namespace

std::optional<bool> WaitsInCollective(const std::string& file) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string text(1 << 20, '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  if (n <= 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  for (const char* marker : {"torch/distributed/", "c10d::", "gloo::", "ncclKernel", "ProcessGroup"}) {
    if (text.find(marker) != std::string::npos) return true;
  }
  return false;
}

std::string StackDumper::FindTool() {
  for (const char* name : {"eu-stack", "gdb"}) {
    absl::StatusOr<std::string> path = FindExecutable(name);
    if (path.ok()) return *path;
  }
  return "";
}

void StackDumper::Start(std::vector<Target> targets, const std::string& tool, Clock::time_point now) {
  active_ = true;
  deadline_ = now + kCollectionLimit;
  targets_ = std::move(targets);
  for (Target& t : targets_) {
    if (t.stack_signal > 0) {
      // The worker holds the file open and appends: its stacks are what grows from here.
      t.size_before = SizeOf(t.file);
      if (::kill(t.pid, t.stack_signal) != 0) t.stack_signal = 0;
      continue;
    }
    if (!ThreadsInUninterruptibleSleep(t.pid).empty()) {
      // A tracer would wait for it as long as it sleeps: the kernel's side is what there is.
      WriteKernelWaits(t.pid, t.file);
      continue;
    }
    pid_t child = tool.empty() ? 0 : SpawnTool(tool, t.pid, t.file);
    if (child > 0) {
      tools_.push_back(child);
    } else {
      UniqueFd f(::open(t.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
      std::string why = tool.empty() ? "no stack tool is installed: install elfutils (eu-stack) or gdb\n"
                                     : absl::StrCat("could not run ", tool, "\n");
      if (f.valid()) WriteAll(f.get(), why.data(), why.size());
    }
  }
}

bool StackDumper::OnExit(pid_t pid) {
  auto it = std::find(tools_.begin(), tools_.end(), pid);
  if (it == tools_.end()) return false;
  tools_.erase(it);
  return true;
}

bool StackDumper::Finished(Clock::time_point now) const {
  if (!active_) return true;
  if (now >= deadline_) return true;
  if (!tools_.empty()) return false;
  return std::all_of(targets_.begin(), targets_.end(),
                     [](const Target& t) { return t.stack_signal == 0 || SizeOf(t.file) > t.size_before; });
}

StackDumper::Clock::time_point StackDumper::next_check(Clock::time_point now) const {
  return std::min(deadline_, now + kRecheck);
}

std::vector<std::string> StackDumper::Finish() {
  for (pid_t tool : tools_) ::kill(tool, SIGKILL);  // reaped by the agent as adopted children
  if (!tools_.empty()) {
    // A tracer killed mid-attach can leave its target stopped, deaf to the stop signal that follows.
    for (const Target& t : targets_) {
      if (t.stack_signal == 0) ::kill(t.pid, SIGCONT);
    }
  }
  tools_.clear();
  active_ = false;
  std::vector<std::string> files;
  for (const Target& t : targets_) {
    if (SizeOf(t.file) > 0) files.push_back(t.file);
  }
  targets_.clear();
  return files;
}

}  // namespace dtrun

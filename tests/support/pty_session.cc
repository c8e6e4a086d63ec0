#include "tests/support/pty_session.h"

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent/child_process.h"
#include "agent/worker_env.h"
#include "base/executable.h"
#include "tests/support/process_harness.h"

extern char** environ;

namespace dtrun::testing {

PtySession::PtySession(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  std::map<std::string, std::string> merged = EnvironToMap(environ);
  for (auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  for (std::string& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::string exe = FindExecutable(argv[0]).value_or(argv[0]);
  winsize size{40, 200, 0, 0};
  int master = -1;
  pid_ = ::forkpty(&master, nullptr, nullptr, &size);
  if (pid_ == 0) {
    // forkpty made us a session leader with the terminal as controlling terminal, in its
    // foreground process group: a shell's foreground job.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(exe.c_str(), cargv.data(), cenv.data());
    ::_exit(127);
  }
  master_ = UniqueFd(master);
}

PtySession::~PtySession() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

bool PtySession::Pump(std::chrono::steady_clock::time_point deadline) {
  if (!master_.valid()) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{master_.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char buf[65536];
  ssize_t n = ::read(master_.get(), buf, sizeof(buf));
  if (n <= 0) {
    master_.Reset();  // EIO: every process holding the terminal has closed it
    return false;
  }
  output_.append(buf, static_cast<size_t>(n));
  return true;
}

bool PtySession::WaitFor(const std::string& needle, std::chrono::milliseconds timeout, size_t from) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto found = [&] { return output_.size() > from && output_.find(needle, from) != std::string::npos; };
  while (!found()) {
    if (!Pump(deadline)) return found();
  }
  return true;
}

void PtySession::Type(const std::string& text) {
  if (master_.valid()) WriteAll(master_.get(), text.data(), text.size());
}

std::optional<int> PtySession::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return 127;
  if (exit_code_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (Pump(deadline)) {
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (!WaitForPidExit(pid_, left)) return std::nullopt;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

}  // namespace dtrun::testing

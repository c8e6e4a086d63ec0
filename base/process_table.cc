#include "base/process_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Splits a NUL-separated /proc file (environ, cmdline).
std::vector<std::string> SplitNul(const std::string& data) {
  return absl::StrSplit(data, '\0', absl::SkipEmpty());
}

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int signo) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0));
}

struct OpenedProcess {
  int pidfd;
  pid_t pid;
};

// Waits until every pidfd is readable (process exited) or the deadline passes. Returns the
// processes still alive.
std::vector<OpenedProcess> WaitForExit(std::vector<OpenedProcess> alive,
                                       std::chrono::steady_clock::time_point deadline) {
  while (!alive.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    std::vector<pollfd> fds;
    for (const OpenedProcess& p : alive) fds.push_back({p.pidfd, POLLIN, 0});
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    std::vector<OpenedProcess> still;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ::close(alive[i].pidfd);
      } else {
        still.push_back(alive[i]);
      }
    }
    alive.swap(still);
  }
  return alive;
}

// The fields of /proc/PID/stat from field 3 (state) on: `fields[i]` is field i + 3. The command
// name (field 2) may contain spaces and ')', so they are split after the last ')'.
absl::StatusOr<std::vector<std::string>> StatFields(pid_t pid) {
  std::string stat = ReadWholeFile(absl::StrCat("/proc/", pid, "/stat"));
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) {
    return absl::NotFoundError(absl::StrCat("no process ", pid));
  }
  std::vector<std::string> fields = absl::StrSplit(absl::string_view(stat).substr(close + 2), ' ');
  if (fields.size() < 22) return absl::NotFoundError(absl::StrCat("unreadable /proc/", pid, "/stat"));
  return fields;
}

// Parses PPID (field 4), the process group (field 5) and start time (field 22) from /proc/PID/stat.
absl::Status ParseStat(pid_t pid, ProcessEntry* entry) {
  DT_ASSIGN_OR_RETURN(std::vector<std::string> fields, StatFields(pid));
  if (!absl::SimpleAtoi(fields[1], &entry->ppid) || !absl::SimpleAtoi(fields[2], &entry->pgid) ||
      !absl::SimpleAtoi(fields[19], &entry->start_ticks)) {
    return absl::NotFoundError(absl::StrCat("unreadable /proc/", pid, "/stat"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid) {
  DT_ASSIGN_OR_RETURN(std::vector<std::string> fields, StatFields(pid));
  uint64_t utime = 0, stime = 0;
  int64_t rss_pages = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime) ||
      !absl::SimpleAtoi(fields[21], &rss_pages)) {
    return absl::NotFoundError(absl::StrCat("unreadable /proc/", pid, "/stat"));
  }
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  return ProcessUsage{utime + stime, std::max<int64_t>(0, rss_pages) * page};
}

std::string ReadProcFile(pid_t pid, const std::string& name) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/", name), std::ios::binary);
  std::string line;
  std::getline(in, line);
  return line.substr(0, 256);
}

std::optional<std::chrono::nanoseconds> ThisThreadRunqueueWait() {
  // "<ns on a CPU> <ns waiting on a runqueue> <timeslices>"
  std::vector<std::string> fields = absl::StrSplit(ReadWholeFile("/proc/thread-self/schedstat"), ' ');
  int64_t waited = 0;
  if (fields.size() < 3 || !absl::SimpleAtoi(fields[1], &waited)) return std::nullopt;
  return std::chrono::nanoseconds(waited);
}

std::map<pid_t, uint64_t> ThreadsInUninterruptibleSleep(pid_t pid) {
  std::map<pid_t, uint64_t> sleeping;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    std::string stat = ReadWholeFile(task.path().string() + "/stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'D') continue;
    pid_t tid = 0;
    if (!absl::SimpleAtoi(task.path().filename().string(), &tid)) continue;
    uint64_t switches = 0;
    std::istringstream status(ReadWholeFile(task.path().string() + "/status"));
    for (std::string line; std::getline(status, line);) {
      uint64_t n = 0;
      absl::string_view v(line);
      if (absl::ConsumePrefix(&v, "voluntary_ctxt_switches:") || absl::ConsumePrefix(&v, "nonvoluntary_ctxt_switches:")) {
        if (absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &n)) switches += n;
      }
    }
    sleeping[tid] = switches;
  }
  return sleeping;
}

absl::StatusOr<unsigned long long> ProcessStartTicks(pid_t pid) {
  ProcessEntry entry;
  DT_RETURN_IF_ERROR(ParseStat(pid, &entry));
  return entry.start_ticks;
}

absl::StatusOr<ProcessEntry> ReadProcess(pid_t pid, const std::vector<std::string>& env_names) {
  ProcessEntry entry;
  entry.pid = pid;
  DT_RETURN_IF_ERROR(ParseStat(pid, &entry));
  for (const std::string& var : SplitNul(ReadWholeFile(absl::StrCat("/proc/", pid, "/environ")))) {
    size_t eq = var.find('=');
    if (eq == std::string::npos) continue;
    std::string name = var.substr(0, eq);
    for (const std::string& wanted : env_names) {
      if (name == wanted) entry.env[name] = var.substr(eq + 1);
    }
  }
  entry.cmdline = absl::StrJoin(SplitNul(ReadWholeFile(absl::StrCat("/proc/", pid, "/cmdline"))), " ");
  return entry;
}

std::vector<ProcessEntry> FindProcessesWithEnv(const std::string& marker_name,
                                               const std::optional<std::string>& marker_value,
                                               std::vector<std::string> env_names) {
  env_names.push_back(marker_name);
  std::vector<ProcessEntry> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  const pid_t self = ::getpid();
  const uid_t uid = ::getuid();
  const std::string needle = marker_name + "=";
  while (dirent* de = ::readdir(dir)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(de->d_name, &pid) || pid == self) continue;
    struct stat st;
    // Only the caller's own processes, root included: `dtrun kill --all` never reaches other users.
    if (::fstatat(::dirfd(dir), de->d_name, &st, 0) != 0 || st.st_uid != uid) continue;
    // Cheap test first: most processes do not carry the marker at all.
    std::string environ = ReadWholeFile(absl::StrCat("/proc/", pid, "/environ"));
    if (environ.find(needle) == std::string::npos) continue;
    absl::StatusOr<ProcessEntry> entry = ReadProcess(pid, env_names);
    if (!entry.ok()) continue;
    auto it = entry->env.find(marker_name);
    if (it == entry->env.end()) continue;
    if (marker_value.has_value() && it->second != *marker_value) continue;
    found.push_back(std::move(*entry));
  }
  ::closedir(dir);
  return found;
}

std::vector<ProcessEntry> ChildrenOf(pid_t parent) {
  std::vector<ProcessEntry> out;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* de = ::readdir(dir)) {
    ProcessEntry e;
    if (!absl::SimpleAtoi(de->d_name, &e.pid)) continue;
    if (ParseStat(e.pid, &e).ok() && e.ppid == parent) out.push_back(e);
  }
  ::closedir(dir);
  return out;
}

int TerminateProcesses(const std::vector<ProcessEntry>& procs, int signo,
                       std::chrono::milliseconds grace) {
  std::vector<OpenedProcess> opened;
  for (const ProcessEntry& p : procs) {
    int pidfd = PidfdOpen(p.pid);
    if (pidfd < 0) continue;
    // Checked after the pidfd is held, so the PID cannot be recycled under us.
    absl::StatusOr<unsigned long long> ticks = ProcessStartTicks(p.pid);
    if (!ticks.ok() || *ticks != p.start_ticks || PidfdSendSignal(pidfd, signo) != 0) {
      ::close(pidfd);
      continue;
    }
    opened.push_back({pidfd, p.pid});
  }
  const int signalled = static_cast<int>(opened.size());
  auto now = std::chrono::steady_clock::now();
  std::vector<OpenedProcess> alive = WaitForExit(std::move(opened), now + grace);
  for (const OpenedProcess& p : alive) PidfdSendSignal(p.pidfd, SIGKILL);
  alive = WaitForExit(std::move(alive), std::chrono::steady_clock::now() + std::chrono::seconds(5));
  for (const OpenedProcess& p : alive) ::close(p.pidfd);
  return signalled;
}

}  // namespace dtrun

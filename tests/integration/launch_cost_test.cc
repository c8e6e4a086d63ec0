// What a no-op launch costs, counted rather than timed (issue 26; the times are measured in
// docs/BENCHMARKS.md, "Launch and exit"): the shared libraries dtrun maps, the threads it starts,
// how often it scans /proc, and the files it writes, as strace sees them. A new feature that
// starts a thread, scans /proc or writes a file on every launch shows up here, not as a slow CI.
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

struct Counts {
  int libraries = 0;       // shared libraries dtrun opened before its first worker
  int threads = 0;         // threads dtrun started
  int environ_reads = 0;   // /proc/PID/environ files read (the stray scan reads each process's)
  int most_reads_of_one = 0;
  int files_written = 0;   // opened for writing, /dev/null aside
  std::string written;
};

Counts CountOf(const std::string& trace) {
  Counts c;
  std::istringstream lines(trace);
  std::string line;
  std::string dtrun_pid;
  bool forked = false;
  std::map<std::string, int> reads;
  const std::regex pid_re("^(\\d+) +(.*)$");
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, pid_re)) continue;
    const std::string pid = m[1], call = m[2];
    if (dtrun_pid.empty()) dtrun_pid = pid;  // the first line is dtrun's execve
    if (call.rfind("clone", 0) == 0) {
      if (call.find("CLONE_THREAD") != std::string::npos) {
        ++c.threads;
      } else if (pid == dtrun_pid) {
        forked = true;
      }
      continue;
    }
    if (call.rfind("openat(", 0) != 0 || call.find("= -1") != std::string::npos) continue;
    std::smatch path;
    if (!std::regex_search(call, path, std::regex("\"([^\"]*)\""))) continue;
    const std::string p = path[1];
    if (pid == dtrun_pid && !forked && std::regex_search(p, std::regex("\\.so(\\.[0-9.]+)?$"))) ++c.libraries;
    if (std::regex_match(p, std::regex("/proc/\\d+/environ"))) {
      ++c.environ_reads;
      c.most_reads_of_one = std::max(c.most_reads_of_one, ++reads[p]);
    }
    if (p != "/dev/null" && (call.find("O_WRONLY") != std::string::npos || call.find("O_RDWR") != std::string::npos)) {
      ++c.files_written;
      c.written += p + "\n";
    }
  }
  return c;
}

// TSan's runtime starts a thread of its own in every instrumented process.
#if defined(__SANITIZE_THREAD__)
constexpr int kSanitizerThreads = 1;
#elif defined(__has_feature)
constexpr int kSanitizerThreads = __has_feature(thread_sanitizer) ? 1 : 0;
#else
constexpr int kSanitizerThreads = 0;
#endif

TEST(LaunchCostTest, ANoOpLaunchMapsFewLibrariesStartsThreeThreadsScansProcOnceAndWritesTwoFiles) {
  const std::string dir = MakeTempDir();
  auto [rc, out] = RunToEnd({"strace", "-f", "-qq", "-e", "trace=clone,clone3,openat", "-o", dir + "/trace", DtrunBinary(),
                             "--standalone", "--nproc-per-node", "4", "/bin/true"});
  ASSERT_NE(rc, 127) << "needs strace (scripts/install-deps.sh installs it): " << out;
  ASSERT_EQ(rc, 0) << out;
  const std::string trace = ReadText(dir + "/trace");
  const Counts c = CountOf(trace);
  // libc, libm, libstdc++, libgcc_s, spdlog, fmt, xxhash: Abseil is linked in (cmake/absl_linkage.cmake).
  EXPECT_LE(c.libraries, 8) << trace.substr(0, 4000);
  // The console's writers (base/console_writer.h; one when stdout and stderr are the same file)
  // and the workers' store (agent/tcp_store_server.h); no sampler for GPUs this machine lacks.
  EXPECT_LE(c.threads, 3 + kSanitizerThreads) << trace.substr(0, 4000);
  // The stray scan at the end of the round, repeated at most 3 times (Agent::KillStrays; with
  // other jobs running beside it a second round was seen), never once per worker or per tick.
  EXPECT_LE(c.most_reads_of_one, 3) << c.environ_reads << " reads";
  // The run's registry entry and its status file (each written once, by rename).
  EXPECT_LE(c.files_written, 2) << c.written;
}

}  // namespace
}  // namespace dtrun::testing

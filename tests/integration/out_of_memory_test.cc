// A worker the kernel's out-of-memory killer ends is named so (agent/oom_kills.h): dtrun runs in a
// memory cgroup of its own with a small limit, as a Slurm job or a container would, and a worker
// (or a child it forked, as a DataLoader does) grows until the kernel kills it.
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/poll.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kLimitBytes = int64_t{512} << 20;  // far above any dtrun build's own (TSan, ASan)

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// A memory cgroup with kLimitBytes and no swap, on cgroup v2 (the memory controller enabled at
// the root) or v1; removed at the end. Needs root.
class MemoryCgroup {
 public:
  MemoryCgroup() {
    const std::string name = absl::StrCat("dtrun-oom-test-", ::getpid());
    std::ifstream v2_controllers("/sys/fs/cgroup/cgroup.subtree_control");
    std::string controllers((std::istreambuf_iterator<char>(v2_controllers)), {});
    if (controllers.find("memory") != std::string::npos) {
      Make("/sys/fs/cgroup/" + name, {{"memory.max", kLimitBytes}, {"memory.swap.max", 0}});
    } else if (std::filesystem::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
      // memsw (memory + swap) after the memory limit: it may never be below it.
      Make("/sys/fs/cgroup/memory/" + name,
           {{"memory.limit_in_bytes", kLimitBytes}, {"memory.memsw.limit_in_bytes", kLimitBytes}});
    }
  }
  ~MemoryCgroup() {
    if (dir_.empty()) return;
    // The kernel lets the cgroup go only once it has finished with the processes that were in it,
    // which can lag their exit (seen under TSan on cgroup v1: EBUSY), and v1 has no event for it:
    // retried for a bounded time. A process still inside after that is a real leak.
    int error = 0;
    PollUntil(
        [&] {
          error = ::rmdir(dir_.c_str()) == 0 ? 0 : errno;
          return error != EBUSY;
        },
        std::chrono::seconds(10), std::chrono::milliseconds(20));
    if (error == 0) return;
    std::ifstream procs(dir_ + "/cgroup.procs");
    std::string left((std::istreambuf_iterator<char>(procs)), {});
    ADD_FAILURE() << "could not remove " << dir_ << ": " << std::strerror(error) << "; processes in it: " << left;
  }
  // Empty when no memory cgroup could be made (not root, no memory controller).
  const std::string& dir() const { return dir_; }

  // `argv` run in the cgroup: a shell moves itself in, then becomes the program.
  std::vector<std::string> Inside(std::vector<std::string> argv) const {
    std::vector<std::string> wrapped = {"/bin/sh", "-c", "echo $$ > \"$0\" && exec \"$@\"", dir_ + "/cgroup.procs"};
    wrapped.insert(wrapped.end(), argv.begin(), argv.end());
    return wrapped;
  }

 private:
  void Make(const std::string& dir, const std::vector<std::pair<std::string, int64_t>>& limits) {
    if (::mkdir(dir.c_str(), 0755) != 0) return;
    dir_ = dir;
    for (const auto& [file, value] : limits) {
      const std::string path = dir + "/" + file;
      if (std::filesystem::exists(path) && !WriteFile(path, absl::StrCat(value))) {
        ADD_FAILURE() << "could not write " << value << " to " << path;
      }
    }
  }

  std::string dir_;
};

class OutOfMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "making a memory cgroup needs root";
    if (cgroup_.dir().empty()) GTEST_SKIP() << "no memory cgroup controller to limit a job with (cgroup v1 or v2)";
    if (RunToEnd(cgroup_.Inside({"/bin/true"})).first != 0) {
      GTEST_SKIP() << "cannot move a process into " << cgroup_.dir() << " (a container without a cgroup namespace?)";
    }
    events_ = MakeTempDir() + "/events.jsonl";
  }
  std::pair<int, std::string> Dtrun(const std::string& who, int attempts, int max_restarts) {
    return RunToEnd(cgroup_.Inside({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts",
                                    absl::StrCat(max_restarts), "--event-log", events_, Worker("out_of_memory.py"), who,
                                    absl::StrCat(attempts)}),
                    {{"PYTHON_EXEC", "/usr/bin/python3"}});
  }

  MemoryCgroup cgroup_;
  std::string events_;
};

TEST_F(OutOfMemoryTest, AWorkerTheKernelKilledForMemoryIsNamedSoInTheRoundAndTheSummary) {
  auto [rc, out] = Dtrun("worker", /*attempts=*/2, /*max_restarts=*/1);
  EXPECT_EQ(rc, 128 + SIGKILL) << out;
  // The restart says why, and so does the summary, with the cgroup's count and limit.
  EXPECT_THAT(out, HasSubstr("round 1: worker rank 1 on ")) << out;
  EXPECT_THAT(out, HasSubstr("failed (signal 9: out of memory, killed by the kernel); restart 1/1")) << out;
  EXPECT_THAT(out, HasSubstr("exitcode  : -9")) << out;
  EXPECT_THAT(out, HasSubstr("error_file: <N/A>")) << out;
  EXPECT_THAT(out, HasSubstr("traceback : killed by the kernel's out-of-memory killer (oom_kill 1 -> 2 in ")) << out;
  EXPECT_THAT(out, HasSubstr("its memory limit is 512.0 MiB")) << out;
  EXPECT_THAT(out, Not(HasSubstr("Signal 9 (SIGKILL) received by PID"))) << out;
  std::vector<nlohmann::json> failures = EventsOfKind(events_, "failure");
  ASSERT_EQ(failures.size(), 2u) << ReadText(events_);
  for (const nlohmann::json& f : failures) {
    EXPECT_EQ(f["kind"], "oom_killed") << f.dump();
    EXPECT_EQ(f["rank"], 1) << f.dump();
  }
}

TEST_F(OutOfMemoryTest, AFailureAfterAChildWasKilledForMemorySaysSo) {
  auto [rc, out] = Dtrun("child", /*attempts=*/1, /*max_restarts=*/0);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("is killed by signal: Killed")) << out;  // the worker's own error
  EXPECT_THAT(out, HasSubstr("[dtrun] the kernel's out-of-memory killer killed 1 process of this job during this "
                             "attempt (oom_kill 0 -> 1 in "))
      << out;
  std::vector<nlohmann::json> failures = EventsOfKind(events_, "failure");
  ASSERT_EQ(failures.size(), 1u) << ReadText(events_);
  EXPECT_EQ(failures[0]["kind"], "exited") << failures[0].dump();
}

}  // namespace
}  // namespace dtrun::testing

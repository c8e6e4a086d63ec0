#include "worker/collective_watchdog.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "base/env_names.h"
#include "base/exit_codes.h"
#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Runs `body` in a forked child and returns its exit status.
template <typename F>
int InChild(F body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(CollectiveWatchdogTest, AHungCollectiveEndsTheProcessWithTheTimeoutCodeAndSaysWhatHung) {
  const std::string error_file = ::testing::TempDir() + "/watchdog_error.json";
  std::remove(error_file.c_str());
  int status = InChild([&error_file] {
    ::setenv(env::kErrorFile, error_file.c_str(), 1);
    CollectiveWatchdog w(std::chrono::milliseconds(100), 3);
    CollectiveWatchdog::Scope armed(&w, "a test all-reduce");
    int fds[2];
    if (::pipe(fds) != 0) ::_exit(1);
    char c;
    ssize_t ignored = ::read(fds[0], &c, 1);  // a collective that never completes
    (void)ignored;
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kCollectiveTimeoutExitCode);
  std::ifstream in(error_file);
  const std::string record((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(record.find("a test all-reduce did not complete within 0 s (a peer lost or stuck)"), std::string::npos)
      << record;
}

TEST(CollectiveWatchdogTest, CollectivesThatFinishInTimeAreLeftAlone) {
  int status = InChild([] {
    CollectiveWatchdog w(std::chrono::milliseconds(200), 0);
    for (int i = 0; i < 100; ++i) CollectiveWatchdog::Scope armed(&w, "a quick all-reduce");
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace dtrun::worker

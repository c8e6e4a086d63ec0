// A console nobody reads (`dtrun ... | reader-that-never-reads`): dtrun still restarts failed
// workers and obeys Ctrl-C, and a reader that comes back late gets every line.
#include <signal.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;

// 512 KiB of lines: more than dtrun's stdout pipe and the worker's pipe hold together (so a
// dtrun that writes on its event loop is stuck before the worker gets past it), less than the
// console writer's queue takes before it pushes back.
constexpr char kFloodThenFail[] =
    "echo attempt $TORCHELASTIC_RESTART_COUNT started >&2; yes 0123456789abcdef | head -c 524288; "
    "echo attempt $TORCHELASTIC_RESTART_COUNT wrote >&2; exit 1";

TEST(UnreadConsoleTest, FailuresAndCtrlCAreActedOnWhileStdoutIsNeverRead) {
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "--max-restarts", "1", "/bin/sh", "-c",
             kFloodThenFail});
  h.ReadStdout(false);
  // Attempt 0's output does not fit in the pipes: only a loop that never blocks sees it fail.
  ASSERT_TRUE(h.WaitForOutput("attempt 0 wrote", seconds(30))) << h.err();
  ASSERT_TRUE(h.WaitForOutput("attempt 1 started", seconds(30))) << h.err();
  // Attempt 1 is now held back (the console is full) or done writing; either way Ctrl-C works.
  ::kill(h.pid(), SIGINT);
  EXPECT_EQ(h.Wait(seconds(30)), 128 + SIGINT) << h.err();
  EXPECT_NE(h.err().find("received SIGINT"), std::string::npos) << h.err();
}

TEST(UnreadConsoleTest, AReaderThatComesBackGetsEveryLineInOrder) {
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
             "echo started >&2; seq 1 200000"});
  h.ReadStdout(false);
  ASSERT_TRUE(h.WaitForOutput("[default1]:started", seconds(30))) << h.err();
  ASSERT_TRUE(h.WaitForOutput("[default0]:started", seconds(30))) << h.err();
  h.ReadStdout(true);  // the workers were held back, not dropped
  ASSERT_EQ(h.Wait(seconds(60)), 0) << h.err();
  for (const char* rank : {"[default0]:", "[default1]:"}) {
    int lines = 0, last = 0;
    bool in_order = true;
    for (size_t at = h.out().find(rank); at != std::string::npos; at = h.out().find(rank, at + 1)) {
      int n = static_cast<int>(std::strtol(h.out().c_str() + at + 11, nullptr, 10));
      in_order = in_order && n == last + 1;
      last = n;
      ++lines;
    }
    EXPECT_EQ(lines, 200000) << rank;
    EXPECT_TRUE(in_order) << rank;
  }
}

// 600 KiB: more than the pipes hold, less than the console writer queues before it holds the
// workers back, so the job ends with output still unwritten.
constexpr char kWriteThenExit[] = "yes 0123456789abcdef | head -c 614400; echo WROTE >&2";

// `dtrun ... | reader-that-never-reads`: once the job has ended, what the console did not take
// gets a bounded time (DTRUN_CONSOLE_DRAIN_TIMEOUT here, 30 s by default), then is dropped with
// one line saying so; SIGTERM ends that wait at once.
TEST(UnreadConsoleTest, AfterTheJobEndsAnUnreadConsoleGetsABoundedTimeAndTheDropIsNamed) {
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c", kWriteThenExit},
            {{"DTRUN_CONSOLE_DRAIN_TIMEOUT", "1"}});
  h.ReadStdout(false);
  EXPECT_EQ(h.Wait(seconds(60)), 0) << h.err();
  EXPECT_NE(h.err().find("dtrun: dropped "), std::string::npos) << h.err();
  EXPECT_NE(h.err().find("(it took nothing for 1 s after the job ended); --log-dir DIR keeps every line"),
            std::string::npos)
      << h.err();
}

TEST(UnreadConsoleTest, SigtermEndsTheWaitForAnUnreadConsole) {
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c", kWriteThenExit});
  h.ReadStdout(false);
  ASSERT_TRUE(h.WaitForOutput("WROTE", seconds(30))) << h.err();
  ::kill(h.pid(), SIGTERM);
  // Bounded well below the 30 s a reader that takes nothing would otherwise get.
  std::optional<int> rc = h.Wait(seconds(20));
  ASSERT_TRUE(rc.has_value()) << h.err();
  EXPECT_NE(h.err().find("dtrun: dropped "), std::string::npos) << h.err();
}

}  // namespace
}  // namespace dtrun::testing

// The remote half of `dtrun -H` on one machine: a dtrun started with --control-stdin, fed the lines
// the launching dtrun sends over ssh (launcher/control_stdin.h), and the end of them. Single-node,
// so the TSan build runs these too (its thread reads stdin while the agent runs).
#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

std::unique_ptr<Harness> RemoteDtrun() {
  return std::make_unique<Harness>(
      std::vector<std::string>{DtrunBinary(), "--control-stdin", "--standalone", "--nproc-per-node", "2", "--no-python",
                               Worker("idle_until_stopped.sh")},
      std::map<std::string, std::string>{}, /*pipe_stdin=*/true);
}

TEST(ControlStdinTest, ASignalLineStopsTheWorkersAsThatSignalWould) {
  auto dtrun = RemoteDtrun();
  ASSERT_TRUE(dtrun->WriteStdin("token t0k3n\n"));
  ASSERT_TRUE(dtrun->WaitForOutput("READY 0")) << dtrun->all();
  ASSERT_TRUE(dtrun->WaitForOutput("READY 1")) << dtrun->all();
  ASSERT_TRUE(dtrun->WriteStdin("signal SIGINT\n"));
  EXPECT_EQ(dtrun->Wait(seconds(60)), 128 + SIGINT) << dtrun->all();
  EXPECT_THAT(dtrun->err(), HasSubstr("received SIGINT; forwarding it to the workers"));
}

// The launching dtrun, or its ssh, is gone: no process of the job may stay.
TEST(ControlStdinTest, TheEndOfTheChannelStopsTheJobAsSigterm) {
  auto dtrun = RemoteDtrun();
  ASSERT_TRUE(dtrun->WriteStdin("token t0k3n\nsomething else\n"));
  ASSERT_TRUE(dtrun->WaitForOutput("READY 1")) << dtrun->all();
  dtrun->CloseStdin();
  EXPECT_EQ(dtrun->Wait(seconds(60)), 128 + SIGTERM) << dtrun->all();
  EXPECT_THAT(dtrun->err(), HasSubstr("a line dtrun does not know; ignored"));
  EXPECT_THAT(dtrun->err(), HasSubstr("the connection to the launching dtrun (its ssh) closed"));
}

TEST(ControlStdinTest, WithoutTheTokenLineNothingStarts) {
  auto dtrun = RemoteDtrun();
  ASSERT_TRUE(dtrun->WriteStdin("hello\n"));
  EXPECT_EQ(dtrun->Wait(seconds(60)), 2) << dtrun->all();
  EXPECT_THAT(dtrun->err(), HasSubstr("--control-stdin is for a dtrun started by dtrun -H"));
  EXPECT_THAT(dtrun->out(), ::testing::Not(HasSubstr("READY")));
}

}  // namespace
}  // namespace dtrun::testing

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

// "input" lines are the workers' stdin (routed as a terminal's would be); "input-end" ends it.
TEST(ControlStdinTest, InputLinesAreTheWorkersStdinAndInputEndEndsIt) {
  Harness dtrun({DtrunBinary(), "--control-stdin", "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
                 "if [ $LOCAL_RANK = 0 ]; then read line; echo \"got $line\"; fi; read more || echo EOF"},
                {}, /*pipe_stdin=*/true);
  ASSERT_TRUE(dtrun.WriteStdin("stdin terminal\ntoken t0k3n\ninput tab\\there\\n\n"));
  ASSERT_TRUE(dtrun.WaitForOutput("[default0]:got tab\there")) << dtrun.all();
  ASSERT_TRUE(dtrun.WriteStdin("input-end\n"));
  EXPECT_EQ(dtrun.Wait(seconds(60)), 0) << dtrun.all();
  EXPECT_THAT(dtrun.out(), HasSubstr("[default0]:EOF"));
  EXPECT_THAT(dtrun.out(), HasSubstr("[default1]:EOF"));
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

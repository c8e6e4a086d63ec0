#include "launcher/host_output.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/pipe_console.h"

namespace dtrun {
namespace {

using Clock = HostOutput::Clock;
using ::dtrun::testing::PipeConsole;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr auto kQuiet = HostOutput::kQuietTime;

struct Fixture {
  PipeConsole c;
  HostOutput out{{"a", "b"}, Consoles{c.console, c.console}};
  Clock::time_point t0 = Clock::now();
};

TEST(HostOutputTest, WholeLinesPassAtOnceAndDtrunsOwnNameTheirHost) {
  Fixture f;
  f.out.Write(0, false, "[default0]:one\n[default0]:tw", f.t0);
  f.out.Write(1, true, "[dtrun] round 0 started\n", f.t0);
  f.out.Write(0, false, "o\n", f.t0);
  EXPECT_FALSE(f.out.quiet_deadline().has_value());
  EXPECT_EQ(f.c.Take(), "[default0]:one\n[dtrun b] round 0 started\n[default0]:two\n");
}

TEST(HostOutputTest, APromptIsShownOnceItsHostIsQuietAndNamesThatHost) {
  Fixture f;
  f.out.Write(1, false, "[default1]:(Pdb) ", f.t0);
  ASSERT_TRUE(f.out.quiet_deadline().has_value());
  EXPECT_EQ(*f.out.quiet_deadline(), f.t0 + kQuiet);
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet / 2), IsEmpty());
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet), ElementsAre(1));
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + 2 * kQuiet), IsEmpty());  // reported once
  // Its host's next bytes continue the line; another host's line first ends it.
  f.out.Write(1, false, "p x", f.t0 + kQuiet);
  f.out.Write(0, false, "[default0]:tick\n", f.t0 + kQuiet);
  f.out.Write(1, false, "\n[default1]:42\n", f.t0 + kQuiet);
  EXPECT_EQ(f.c.Take(), "[default1]:(Pdb) p x\n[default0]:tick\n\n[default1]:42\n");
}

TEST(HostOutputTest, AProgressBarIsShownButIsNoPrompt) {
  Fixture f;
  f.out.Write(0, true, "\r[default0]:train:  50%|#####", f.t0);
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet), IsEmpty());
  f.out.Write(0, true, "\r[default0]:train: 100%|##########\n", f.t0 + kQuiet);
  EXPECT_EQ(f.c.Take(), "\r[default0]:train:  50%|#####\r[default0]:train: 100%|##########\n");
}

// The terminal echoed the typed line, newline and all: the host's next line needs no newline first.
TEST(HostOutputTest, AnEchoedLineEndsThePromptsConsoleLine) {
  Fixture f;
  f.out.Write(1, false, "[default1]:(Pdb) ", f.t0);
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet), ElementsAre(1));
  f.out.ForgetOpenLines();
  f.out.Write(0, false, "[default0]:tick\n", f.t0 + kQuiet);
  f.out.Write(1, false, "[default1]:430\n", f.t0 + kQuiet);
  EXPECT_EQ(f.c.Take(), "[default1]:(Pdb) [default0]:tick\n[default1]:430\n");
}

// A summary being collected on a host's stderr holds that stream: its tail is not a prompt.
TEST(HostOutputTest, APartialLineAfterAHeldSummaryWaitsForIt) {
  Fixture f;
  const std::string rule(60, '=');
  f.out.Write(0, true, rule + "\ntrain.py FAILED\npart", f.t0);
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet), IsEmpty());
  f.out.Write(0, true, "ial\n" + rule + "\n", f.t0 + kQuiet);
  f.out.Write(1, true, rule + "\ntrain.py FAILED\npartial\n" + rule + "\n", f.t0 + kQuiet);  // shown once
  EXPECT_EQ(f.out.dropped_summaries(), 1);
  EXPECT_EQ(f.c.Take(), rule + "\ntrain.py FAILED\npartial\n" + rule + "\n");
}

TEST(HostOutputTest, AStreamsEndShowsWhatItHeldAsALine) {
  Fixture f;
  f.out.Write(0, false, "[default0]:no newline", f.t0);
  f.out.End(0, false);
  f.out.Write(1, false, "[default1]:(Pdb) ", f.t0);
  EXPECT_THAT(f.out.ShowQuiet(f.t0 + kQuiet), ElementsAre(1));
  f.out.End(1, false);
  f.out.Write(0, true, "[dtrun] after\n", f.t0);
  EXPECT_EQ(f.c.Take(), "[default0]:no newline\n[default1]:(Pdb) \n[dtrun a] after\n");
}

TEST(HostOutputTest, AVeryLongLineIsShownInPiecesWithoutWaiting) {
  Fixture f;
  const std::string big(HostOutput::kMaxLine, 'x');
  f.out.Write(0, false, big, f.t0);
  EXPECT_FALSE(f.out.quiet_deadline().has_value());
  f.out.Write(0, false, "y\n", f.t0);
  EXPECT_EQ(f.c.Take(), big + "y\n");
}

}  // namespace
}  // namespace dtrun

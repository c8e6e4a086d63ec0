#include "agent/output_relay.h"

#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"
#include "tests/support/pipe_console.h"

namespace dtrun {
namespace {

using Clock = OutputRelay::Clock;

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

using ::dtrun::testing::PipeConsole;

TEST(OutputRelayTest, PrefixesWholeLines) {
  PipeConsole c;
  {
    OutputRelay relay("[default1]:", c.console, UniqueFd());
    relay.Write("hel");
    relay.Write("lo\nwor");
    relay.Write("ld\n\npartial");
    relay.Flush();
  }
  EXPECT_EQ(c.Take(), "[default1]:hello\n[default1]:world\n[default1]:\n[default1]:partial\n");
}

TEST(OutputRelayTest, PartialLineIsShownOnlyAfterTheQuietTime) {
  PipeConsole c;
  Clock::time_point t0 = Clock::now();
  OutputRelay relay("[0]:", c.console, UniqueFd());
  relay.Write("(Pdb) ", t0);
  ASSERT_TRUE(relay.quiet_deadline().has_value());
  EXPECT_EQ(*relay.quiet_deadline(), t0 + OutputRelay::kQuietTime);
  relay.ShowIfQuiet(t0 + OutputRelay::kQuietTime / 2);
  EXPECT_FALSE(relay.TakePrompted());
  relay.ShowIfQuiet(t0 + OutputRelay::kQuietTime);
  EXPECT_TRUE(relay.TakePrompted());   // began a line, then went quiet: a prompt
  EXPECT_FALSE(relay.TakePrompted());  // reported once
  EXPECT_FALSE(relay.quiet_deadline().has_value());
  relay.Write("p x\n42\n", t0 + OutputRelay::kQuietTime);  // continues the shown line, no 2nd prefix
  relay.Flush();
  EXPECT_EQ(c.Take(), "[0]:(Pdb) p x\n[0]:42\n");
}

// While the console is congested dtrun does not read the worker, so a line it holds the start of is
// not quiet: shown then, its rest would come on a line of its own once another rank's line came
// between (seen as a broken line under TSan's slowness in UnreadConsoleTest).
TEST(OutputRelayTest, ALineHeldWhileTheConsoleIsCongestedIsNotShownAsQuiet) {
  Pipe pipe = *MakePipe(false);  // nobody reads it yet: 64 KiB fit, then the writer queues
  auto writer = std::make_shared<ConsoleWriter>(pipe.write.get(), /*high_water=*/1024);
  auto console = std::make_shared<Console>(writer);
  Clock::time_point t0 = Clock::now();
  OutputRelay relay("[0]:", console, UniqueFd());
  relay.Write(std::string(256 << 10, 'x') + "\n12", t0);
  ASSERT_TRUE(relay.congested());
  EXPECT_FALSE(relay.quiet_deadline().has_value());
  relay.ShowIfQuiet(t0 + 10 * OutputRelay::kQuietTime);
  EXPECT_FALSE(relay.TakePrompted());
  std::string drained;  // the reader comes back
  std::thread reader([&] { drained = ReadAll(pipe.read.get()); });
  ASSERT_TRUE(writer->WaitWritten(-1, std::chrono::seconds(10)));
  ASSERT_FALSE(relay.congested());
  const Clock::time_point t1 = t0 + 20 * OutputRelay::kQuietTime;
  relay.ReadingResumed(t1);
  EXPECT_EQ(relay.quiet_deadline(), t1 + OutputRelay::kQuietTime);
  relay.Write("34\n", t1);  // the rest of the line, read from the pipe: one line
  relay.Flush();
  EXPECT_TRUE(writer->WaitWritten(-1, std::chrono::seconds(10)));
  writer.reset();
  console.reset();
  pipe.write.Reset();
  reader.join();
  EXPECT_NE(drained.find("\n[0]:1234\n"), std::string::npos) << drained.substr(drained.size() - 64);
}

TEST(OutputRelayTest, CarriageReturnRedrawsAreRelayedAsTheyComeAndAreNotPrompts) {
  PipeConsole c;
  Clock::time_point t0 = Clock::now();
  OutputRelay relay("[0]:", c.console, UniqueFd());
  relay.Write("\r 10%|#", t0);
  relay.Write("\r 20%|##", t0);  // the 10% state is shown at once, ended by its '\r'
  relay.ShowIfQuiet(t0 + OutputRelay::kQuietTime);
  EXPECT_FALSE(relay.TakePrompted());
  relay.Write("\r100%|###\n", t0 + OutputRelay::kQuietTime);
  relay.Flush();
  EXPECT_EQ(c.Take(), "[0]: 10%|#\r[0]: 20%|##\r[0]:100%|###\n");
}

TEST(OutputRelayTest, TwoRanksNeverShareAConsoleLine) {
  PipeConsole c;
  Clock::time_point t0 = Clock::now();
  OutputRelay a("[0]:", c.console, UniqueFd());
  OutputRelay b("[1]:", c.console, UniqueFd());
  a.Write("Name: ", t0);
  a.ShowIfQuiet(t0 + OutputRelay::kQuietTime);   // rank 0's prompt is on the console
  b.Write("hello from 1\n", t0);                 // ends rank 0's line first
  a.Write("Ada\n", t0);                          // rank 0's line goes on, with its prefix again
  b.Write("\r50%", t0);
  b.Write("\r60%", t0);                          // rank 1's bar, redrawn in place
  a.Write("done\n", t0);                         // leaves the bar's line whole
  a.Flush();
  b.Flush();
  EXPECT_EQ(c.Take(), "[0]:Name: \n[1]:hello from 1\n[0]:Ada\n[1]:50%\r\n[0]:done\n[1]:60%\n");
}

// A dtrun log line while a rank's prompt is open ends that line (base/console_writer.h); the rank's
// next bytes then begin a line of their own, with their prefix, and so does a bar redrawn after one.
TEST(OutputRelayTest, ALogLineEndsAnOpenLineAndTheRankGoesOnWithItsPrefix) {
  PipeConsole c;
  Clock::time_point t0 = Clock::now();
  OutputRelay a("[0]:", c.console, UniqueFd());
  OutputRelay b("[1]:", c.console, UniqueFd());
  a.Write("(Pdb) ", t0);
  a.ShowIfQuiet(t0 + OutputRelay::kQuietTime);
  c.writer->WriteLog("[dtrun] node b: lost\n");
  a.Write("430\n", t0);
  b.Write("\r50%", t0);
  b.Flush();
  c.writer->WriteLog("[dtrun] round 2\n");
  b.Write("\r60%\n", t0);
  a.Flush();
  b.Flush();
  EXPECT_EQ(c.Take(), "[0]:(Pdb) \n[dtrun] node b: lost\n[0]:430\n[1]:50%\n[dtrun] round 2\n[1]:60%\n");
}

// The console collects a read's segments and hands them over at Flush; a log line from another
// thread can end the open line in between. What continued that line then begins a line of its
// own, with its prefix, and a '\n' meant to end it is not written twice.
TEST(OutputRelayTest, ALogLineBetweenACollectedContinuationAndItsFlushStillLeavesItPrefixed) {
  PipeConsole c;
  int a = 0, b = 0;
  c.console->Write(&a, "[0]:", "(Pdb) ", Console::End::kOpen);
  c.console->Flush();
  c.console->Write(&a, "[0]:", "p x", Console::End::kOpen);  // continues the prompt's line
  c.writer->WriteLog("[dtrun] node b: lost\n");
  c.console->Flush();
  c.console->Write(&a, "[0]:", "", Console::End::kNewline);  // the same line goes on, unprefixed
  c.console->Write(&b, "[1]:", "50%", Console::End::kOpen);
  c.console->Flush();
  c.console->Write(&a, "[0]:", "42", Console::End::kNewline);  // ends [1]'s line first
  c.writer->WriteLog("[dtrun] round 2\n");
  c.console->Flush();
  c.console->Write(&b, "[1]:", "done", Console::End::kOpen);
  c.console->Flush();
  c.console->EndLineOf(&b);
  c.writer->WriteLog("[dtrun] stopped\n");
  c.console->WriteBlock("summary\n");
  EXPECT_EQ(c.Take(),
            "[0]:(Pdb) \n[dtrun] node b: lost\n[0]:p x\n[1]:50%\n[dtrun] round 2\n[0]:42\n[1]:done\n"
            "[dtrun] stopped\nsummary\n");
}

TEST(OutputRelayTest, EmptyPrefixWritesTheWorkersBytesUnchanged) {
  PipeConsole c;
  {
    OutputRelay relay("", c.console, UniqueFd());
    relay.Write("{\"a\": 1}\n{\"b\": 2}\n");
    relay.Flush();
  }
  EXPECT_EQ(c.Take(), "{\"a\": 1}\n{\"b\": 2}\n");
}

TEST(OutputRelayTest, FileGetsRawBytesAndConsoleCanBeOff) {
  absl::StatusOr<Pipe> file = MakePipe(false);
  ASSERT_TRUE(file.ok());
  {
    OutputRelay relay("[x]:", nullptr, std::move(file->write));
    relay.Write("a\r\nb");
    relay.Flush();
  }
  EXPECT_EQ(ReadAll(file->read.get()), "a\r\nb");
}

TEST(OutputRelayTest, KeepsTheLastBytesOfTheStreamWithNoConsoleOrFile) {
  OutputRelay none("[x]:", nullptr, UniqueFd());
  none.Write("nothing kept\n");
  EXPECT_EQ(none.tail(), "");  // KeepTail was not asked for

  OutputRelay relay("[x]:", nullptr, UniqueFd());
  relay.KeepTail(8);
  relay.Write("abc");
  EXPECT_EQ(relay.tail(), "abc");
  EXPECT_FALSE(relay.tail_cut());
  relay.Write("defgh");
  EXPECT_EQ(relay.tail(), "abcdefgh");
  EXPECT_FALSE(relay.tail_cut());
  for (char c = 'i'; c <= 'z'; ++c) relay.Write(std::string(1, c));  // trimmed along the way
  EXPECT_EQ(relay.tail(), "stuvwxyz");
  EXPECT_TRUE(relay.tail_cut());

  OutputRelay once("[x]:", nullptr, UniqueFd());
  once.KeepTail(4);
  once.Write("0123456789");  // one write larger than the tail
  EXPECT_EQ(once.tail(), "6789");
  EXPECT_TRUE(once.tail_cut());
}

TEST(OutputRelayTest, ExpandsTorchrunTemplateVariables) {
  EXPECT_EQ(ExpandPrefixTemplate("[${role_name}${local_rank}]:", "default", 5, 1), "[default1]:");
  EXPECT_EQ(ExpandPrefixTemplate("${rank}|${local_rank}|", "r", 5, 1), "5|1|");
}

}  // namespace
}  // namespace dtrun

#include "base/console_writer.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <string>

#include "base/unique_fd.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr size_t kHighWater = 256 * 1024;

// Reads `size` bytes from a blocking fd (bounded by the test's timeout).
std::string ReadExactly(int fd, size_t size) {
  std::string out;
  char buf[65536];
  while (out.size() < size) {
    ssize_t n = ::read(fd, buf, std::min(sizeof(buf), size - out.size()));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool Readable(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

TEST(ConsoleWriterTest, DeliversBytesInOrder) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get());
  std::string a = "a\n", c = "c\n";
  w.Write(a);
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(w.WriteLog("[dtrun] b\n"));
  w.Write(c);
  EXPECT_TRUE(w.WaitWritten(-1, seconds(10)));
  EXPECT_EQ(ReadExactly(p.read.get(), 14), "a\n[dtrun] b\nc\n");
}

// "[dtrun] ..." never lands inside a worker's open line (pdb's prompt): that line is ended first.
TEST(ConsoleWriterTest, ALogLineAfterAnOpenPromptBeginsALineOfItsOwn) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get());
  std::string prompt = "[default1]:(Pdb) ", answer = "[default1]:430\n";
  w.Write(prompt);
  EXPECT_TRUE(w.WriteLog("[dtrun] host b: exited\n"));
  w.Write(answer);
  EXPECT_TRUE(w.WriteLog("[dtrun] done\n"));
  EXPECT_TRUE(w.WaitWritten(-1, seconds(10)));
  const std::string expected = "[default1]:(Pdb) \n[dtrun] host b: exited\n[default1]:430\n[dtrun] done\n";
  EXPECT_EQ(ReadExactly(p.read.get(), expected.size()), expected);
}

TEST(ConsoleWriterTest, AnUnreadConsoleIsCongestedNotBlockingAndWakesTheLoopOnceRead) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get(), kHighWater);
  const std::string chunk(kHighWater, 'x');
  for (int i = 0; i < 2; ++i) {
    std::string bytes = chunk;
    w.Write(bytes);  // returns at once although nobody reads: the thread is the one blocked
  }
  EXPECT_TRUE(w.congested());
  EXPECT_FALSE(Readable(w.wake_fd(), milliseconds(0)));
  EXPECT_EQ(ReadExactly(p.read.get(), 2 * kHighWater), chunk + chunk);
  ASSERT_TRUE(Readable(w.wake_fd(), seconds(10)));  // congestion cleared
  w.ClearWake();
  EXPECT_FALSE(w.congested());
}

TEST(ConsoleWriterTest, LogLinesAreDroppedPastTheLimitAndCounted) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get(), kHighWater);
  const std::string flood(5 * kHighWater, 'x');
  std::string bytes = flood;
  w.Write(bytes);
  EXPECT_FALSE(w.WriteLog("lost\n"));
  EXPECT_FALSE(w.WriteLog("lost\n"));
  EXPECT_EQ(ReadExactly(p.read.get(), flood.size()), flood);
  ASSERT_TRUE(w.WaitWritten(-1, seconds(10)));
  EXPECT_TRUE(w.WriteLog("kept\n"));
  ASSERT_TRUE(w.WaitWritten(-1, seconds(10)));
  // The flood left its line open: the log lines begin a line of their own.
  const std::string expected = "\n[dtrun] 2 log line(s) dropped while the console was not being read\nkept\n";
  EXPECT_EQ(ReadExactly(p.read.get(), expected.size()), expected);
}

TEST(ConsoleWriterTest, WaitingForAStuckReaderEndsOnInterruptOrStall) {
  Pipe p = *MakePipe(false);
  auto w = std::make_unique<ConsoleWriter>(p.write.get(), kHighWater);
  std::string bytes(1 << 20, 'x');  // more than the pipe holds
  w->Write(bytes);
  EXPECT_FALSE(w->WaitWritten(-1, milliseconds(50)));
  UniqueFd interrupt(::eventfd(1, EFD_CLOEXEC));  // readable: "a signal came"
  EXPECT_FALSE(w->WaitWritten(interrupt.get(), ConsoleWriter::kNoStallLimit));
  w.reset();  // does not wait for the stuck reader
  // The writer's thread is still blocked in write(2): its fd must stay open (as stdout does in
  // dtrun). Closing the read end ends that write with EPIPE; the write end is left open.
  p.read.Reset();
  (void)p.write.Release();
}

TEST(ConsoleWriterTest, AGoneReaderDropsBytesWithoutKillingUs) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get());
  p.read.Reset();
  std::string bytes = "nobody reads this\n";
  w.Write(bytes);  // EPIPE in the writer's thread, SIGPIPE blocked there
  EXPECT_TRUE(w.WaitWritten(-1, seconds(10)));
  EXPECT_FALSE(w.congested());
  EXPECT_FALSE(w.WriteLog("nor this\n"));
}

// The progress line stays below whole lines and never enters a line a worker left open.
TEST(ConsoleWriterTest, TheStatusLineIsRedrawnBelowWholeLinesOnly) {
  Pipe p = *MakePipe(false);
  ConsoleWriter w(p.write.get());
  const std::string erase = "\r\033[K";
  w.SetStatusLine("S1");
  EXPECT_EQ(ReadExactly(p.read.get(), 2), "S1");
  std::string line = "a\n";
  w.Write(line);
  EXPECT_EQ(ReadExactly(p.read.get(), erase.size() + 4), erase + "a\nS1");
  std::string open = "(Pdb) ";
  w.Write(open);  // a prompt: the line is erased and not drawn again after it
  EXPECT_EQ(ReadExactly(p.read.get(), erase.size() + 6), erase + "(Pdb) ");
  w.SetStatusLine("S2");
  std::string rest = "c\n";
  w.Write(rest);
  EXPECT_EQ(ReadExactly(p.read.get(), 4), "c\nS2");
  w.SetStatusLine(std::string(300, 'x'));  // cut to the width (79 when fd is not a terminal)
  EXPECT_EQ(ReadExactly(p.read.get(), erase.size() + 79), erase + std::string(79, 'x'));
  w.SetStatusLine("");
  EXPECT_EQ(ReadExactly(p.read.get(), erase.size()), erase);
  std::string last = "d\n";
  w.Write(last);
  EXPECT_TRUE(w.WaitWritten(-1, seconds(10)));
  EXPECT_EQ(ReadExactly(p.read.get(), 2), "d\n");
  EXPECT_FALSE(Readable(p.read.get(), milliseconds(50)));  // nothing drawn after it
}

}  // namespace
}  // namespace dtrun

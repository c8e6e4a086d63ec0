#include "agent/stdin_router.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

// dtrun's stdin as a pipe, and two workers' stdin pipes; dtrun's stdin events are fed by hand, the
// workers' pipes' readiness by the loop.
class StdinRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = *EventLoop::Create([] { return std::chrono::steady_clock::now(); });
    input_ = *MakePipe(false);
    router_ = std::make_unique<StdinRouter>(input_.read.get(), *loop_);
    ASSERT_EQ(router_->mode(), StdinRouter::Mode::kRouted);
    std::map<int, UniqueFd> sinks;
    for (int r = 0; r < 2; ++r) {
      workers_[r] = *MakePipe(true);
      sinks[r] = std::move(workers_[r].write);
    }
    router_->SetWorkers(std::move(sinks));
  }
  void Type(const std::string& s) {
    ASSERT_TRUE(WriteAll(input_.write.get(), s.data(), s.size()));
    router_->OnEvent(input_.read.get(), EPOLLIN);
  }
  std::string Received(int rank) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(workers_[rank].read.get(), buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }
  bool AtEof(int rank) {
    char c;
    return ::read(workers_[rank].read.get(), &c, 1) == 0;
  }
  std::unique_ptr<EventLoop> loop_;
  Pipe input_;
  Pipe workers_[2];
  std::unique_ptr<StdinRouter> router_;
};

TEST_F(StdinRouterTest, LinesGoToRankZeroUntilARankPrompts) {
  Type("a\nb");
  EXPECT_EQ(Received(0), "a\n");  // "b" waits for its newline
  Type("\n");
  EXPECT_EQ(Received(0), "b\n");
  EXPECT_EQ(Received(1), "");
}

TEST_F(StdinRouterTest, PromptsAreAnsweredInOrderAndTheLastOneKeepsTheInput) {
  router_->OnPrompt(1);
  router_->OnPrompt(0);
  Type("first\nsecond\nthird\n");
  EXPECT_EQ(Received(1), "first\n");
  EXPECT_EQ(Received(0), "second\nthird\n");  // rank 0 answered last: it keeps the input
  router_->OnPrompt(1);
  Type("p x\n");
  Type("c\n");  // typed before rank 1's next prompt showed: still rank 1's
  EXPECT_EQ(Received(1), "p x\nc\n");
}

TEST_F(StdinRouterTest, EndOfInputClosesEveryWorkersStdin) {
  Type("last without newline");
  input_.write.Reset();
  router_->OnEvent(input_.read.get(), EPOLLIN);
  EXPECT_EQ(Received(0), "last without newline");
  EXPECT_TRUE(AtEof(0));
  EXPECT_TRUE(AtEof(1));
}

// A rank that exits (or closes its stdin) loses the line sent to it then; the next ones go on to a
// rank that reads, instead of waiting for the gone one for the rest of the round.
TEST_F(StdinRouterTest, ARankWhoseStdinClosedNoLongerHoldsTheInput) {
  ::signal(SIGPIPE, SIG_IGN);  // as in dtrun: a write to a closed pipe fails with EPIPE
  Type("a\n");
  EXPECT_EQ(Received(0), "a\n");
  workers_[0].read.Reset();
  Type("b\n");
  Type("c\n");
  EXPECT_EQ(Received(1), "c\n");
}

TEST_F(StdinRouterTest, AWorkerThatDoesNotReadHoldsItsLineAndTheRestWaits) {
  // A line larger than the worker's pipe: the router keeps the remainder, delivers nothing after
  // it meanwhile, and goes on when epoll says the pipe has room again.
  const std::string big = std::string(150 * 1024, 'x') + "\n";
  for (size_t at = 0; at < big.size(); at += 50 * 1024) Type(big.substr(at, 50 * 1024));
  Type("next\n");
  std::string got;
  for (int i = 0; i < 50 && (got += Received(0)).size() < big.size() + 5; ++i) {
    loop_->RunOnce(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  EXPECT_EQ(got, big + "next\n");
  EXPECT_EQ(Received(1), "");
}

// Lines arrive faster than rank 0 reads: they go to it in one write as far as its pipe takes them;
// the line the pipe cut waits for it, and the lines it never started are still the router's, so a
// prompt from rank 1 gets the next whole one, as if every line had been sent on its own.
TEST_F(StdinRouterTest, LinesThePipeDidNotStartStillGoToARankThatPrompts) {
  std::string typed;
  for (int i = 0; i < 4000; ++i) typed += "line " + std::to_string(i) + " of the input\n";  // ~90 KiB
  ASSERT_GT(typed.size(), 65536u) << "more than a pipe holds";
  for (size_t at = 0; at < typed.size(); at += 32 * 1024) Type(typed.substr(at, 32 * 1024));
  router_->OnPrompt(1);
  std::string got0, got1;
  for (int i = 0; i < 100; ++i) {  // each turn reads both pipes: the router's writes wait on them
    got0 += Received(0);
    got1 += Received(1);
    if (got0.size() + got1.size() >= typed.size()) break;
    loop_->RunOnce(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  ASSERT_FALSE(got0.empty());
  ASSERT_FALSE(got1.empty()) << "rank 1 prompted and got nothing";
  EXPECT_EQ(got0.back(), '\n') << "rank 0 got whole lines only";
  EXPECT_LT(got0.size(), typed.size());
  // Every byte once, in order: rank 0 the lines up to the one its pipe cut; rank 1 (whose prompt
  // took the next line, and which then keeps the input) all after.
  EXPECT_EQ(got0 + got1, typed);
}

// A full buffer ends in a partial line: the complete lines before it are sent on, and the partial
// one waits for its newline (only a buffer that is full of one line sends it unfinished).
TEST_F(StdinRouterTest, APartialLineAfterAFullBuffersLinesWaitsForItsNewline) {
  router_->SetWorkers({});                 // between rounds: the input piles up
  const std::string tail(16 * 1024, 't');  // the partial line; what is before it fits in the pipe
  std::string lines;
  while (lines.size() < StdinRouter::kMaxBuffered - tail.size()) lines += "a short line\n";
  lines.resize(StdinRouter::kMaxBuffered - tail.size());
  lines.back() = '\n';
  const std::string typed = lines + tail;  // exactly a full buffer
  for (size_t at = 0; at < typed.size(); at += 50 * 1024) Type(typed.substr(at, 50 * 1024));
  Pipe next = *MakePipe(true);
  ASSERT_GE(::fcntl(next.write.get(), F_SETPIPE_SZ, 1 << 20), 1 << 20) << "a pipe that takes every line at once";
  std::map<int, UniqueFd> sinks;
  sinks[0] = std::move(next.write);
  router_->SetWorkers(std::move(sinks));  // the next round: all the lines go in one write
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(next.read.get(), buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  EXPECT_EQ(got.size(), lines.size());
  EXPECT_TRUE(got == lines) << "the partial line was sent before its newline";
  Type("\n");
  ASSERT_GT(n = ::read(next.read.get(), buf, sizeof(buf)), 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), tail + "\n");
}

TEST(StdinRouterModeTest, FilesAndDevNullAreInheritedNotRouted) {
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(StdinRouter::ModeFor(null.get()), StdinRouter::Mode::kInherited);
  absl::StatusOr<Pipe> p = MakePipe(false);
  EXPECT_EQ(StdinRouter::ModeFor(p->read.get()), StdinRouter::Mode::kRouted);
}

}  // namespace
}  // namespace dtrun

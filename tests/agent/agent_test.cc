// The agent against a scripted round source (no launcher, no network): real worker processes,
// rounds and reports as the rendezvous would drive them, and an injected clock for its deadlines.
#include "agent/agent.h"
#include "base/checked_mutex.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

// Plays the rendezvous: the test says what happens after each report.
class ScriptedRounds : public rdzv::RoundSource {
 public:
  explicit ScriptedRounds(int nproc) : nproc_(nproc), fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  int event_fd() const override { return fd_.get(); }
  absl::StatusOr<std::optional<rdzv::NodeView>> Latest() override {
    uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(fd_.get(), &n, sizeof(n));
    CheckedMutexLock lock(&mu_);
    return view_;
  }
  void ReportSuccess(int64_t round) override {
    successes.push_back(round);
    if (on_success) on_success(round);
  }
  void ReportFailure(int64_t round, const std::vector<rdzv::FailureInfo>& failures) override {
    failure_rounds.push_back(round);
    first_failed_rank.push_back(failures.empty() ? -1 : failures[0].global_rank);
    if (on_failure) on_failure(round, failures);
  }
  void Leave() override { ++leaves; }
  std::chrono::milliseconds exit_barrier_timeout() const override { return std::chrono::milliseconds(0); }

  // Running and Over may be called from another thread than the agent's (another node's doing).
  void Running(int64_t round) {
    rdzv::NodeView v;
    v.phase = rdzv::JobPhase::kRunning;
    v.round = round;
    v.role = rdzv::NodeRole::kMember;
    v.assignment = rdzv::Assignment{round, 0, 1, 0, nproc_, "127.0.0.1", 1, "", 0};
    Post(v);
  }
  void Over(rdzv::JobPhase phase, std::vector<rdzv::FailureInfo> failures = {}) {
    rdzv::NodeView v;
    v.phase = phase;
    {
      CheckedMutexLock lock(&mu_);
      v.round = view_ ? view_->round : 0;
    }
    v.failures = std::move(failures);
    v.exit_code = v.failures.empty() ? 0 : rdzv::ExitCodeOf(v.failures[0]);
    v.reason = "scripted";
    Post(v);
  }

  std::function<void(int64_t)> on_success;
  std::function<void(int64_t, const std::vector<rdzv::FailureInfo>&)> on_failure;
  std::vector<int64_t> successes, failure_rounds;
  std::vector<int> first_failed_rank;
  int leaves = 0;

 private:
  void Post(rdzv::NodeView v) {
    {
      CheckedMutexLock lock(&mu_);
      v.version = ++version_;
      view_ = std::move(v);
    }
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(fd_.get(), &one, sizeof(one));
  }
  int nproc_;
  UniqueFd fd_;
  CheckedMutex mu_;
  std::optional<rdzv::NodeView> view_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

// The agent owns its round source; the test keeps the script (and what it recorded) after Run.
class Borrowed : public rdzv::RoundSource {
 public:
  explicit Borrowed(ScriptedRounds* r) : r_(r) {}
  int event_fd() const override { return r_->event_fd(); }
  absl::StatusOr<std::optional<rdzv::NodeView>> Latest() override { return r_->Latest(); }
  void ReportSuccess(int64_t round) override { r_->ReportSuccess(round); }
  void ReportFailure(int64_t round, const std::vector<rdzv::FailureInfo>& f) override { r_->ReportFailure(round, f); }
  void Leave() override { r_->Leave(); }
  std::chrono::milliseconds exit_barrier_timeout() const override { return r_->exit_barrier_timeout(); }

 private:
  ScriptedRounds* r_;
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BlockAgentSignals({SIGTERM});  // before the console writers' threads (they take no signals)
    // Open for the whole process, as a console is: a writer's thread may still be in write(2)
    // when a test ends (~ConsoleWriter does not wait on a write in flight), and closing the
    // descriptor under it was a race TSan caught.
    static const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    stdio_.out = stdio_.err = std::make_shared<ConsoleWriter>(null_fd);
    paths_.error_root = testing::MakeTempDir();
  }
  AgentOptions Options(int nproc, const std::string& script) {
    AgentOptions o;
    o.executable = "/bin/sh";
    o.argv = {"/bin/sh", "-c", script};
    o.program_name = "script";
    o.nproc_per_node = nproc;
    // Unique per test process: the agent ends every process on the machine that carries its
    // launch id, and ctest runs these tests side by side.
    o.launch_id = absl::StrCat("agent-test-", ::getpid());
    o.signals_to_handle = {SIGTERM};
    return o;
  }
  int Run(AgentOptions options, ScriptedRounds& rounds) {
    return Agent(std::move(options), paths_, {{"PATH", "/usr/bin:/bin"}}, std::make_unique<Borrowed>(&rounds), stdio_)
        .Run();
  }

  StdioWriters stdio_;
  AttemptPaths paths_;
};

TEST_F(AgentTest, WorkersThatExitZeroAreReportedAndTheJobsSuccessEndsTheAgent) {
  ScriptedRounds rounds(2);
  ScriptedRounds* r = &rounds;
  r->on_success = [r](int64_t) { r->Over(rdzv::JobPhase::kSucceeded); };
  r->Running(0);
  EXPECT_EQ(Run(Options(2, "exit 0"), rounds), 0);
  EXPECT_EQ(r->successes, std::vector<int64_t>{0});
  EXPECT_TRUE(r->failure_rounds.empty());
  EXPECT_GE(r->leaves, 1);
}

TEST_F(AgentTest, AFailureIsReportedOnceAndTheNextRoundRunsTheWorkersAgain) {
  ScriptedRounds rounds(2);
  ScriptedRounds* r = &rounds;
  r->on_failure = [r](int64_t round, const auto&) { r->Running(round + 1); };
  r->on_success = [r](int64_t) { r->Over(rdzv::JobPhase::kSucceeded); };
  r->Running(0);
  // Rank 1 fails in round 0 only; rank 0 waits to be stopped there.
  const std::string script =
      "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then [ $RANK = 1 ] && exit 7; exec sleep 60; fi; exit 0";
  EXPECT_EQ(Run(Options(2, script), rounds), 0);
  EXPECT_EQ(r->failure_rounds, std::vector<int64_t>{0});
  EXPECT_EQ(r->first_failed_rank, std::vector<int>{1});
  EXPECT_EQ(r->successes, std::vector<int64_t>{1});
}

TEST_F(AgentTest, ARoundEndedElsewhereStopsTheWorkersAndStartsTheNext) {
  ScriptedRounds rounds(1);
  ScriptedRounds* r = &rounds;
  r->on_success = [r](int64_t) { r->Over(rdzv::JobPhase::kSucceeded); };
  r->Running(0);
  // Round 0's worker says it started (through a FIFO), then sleeps; the test then ends round 0
  // as another node's failure would.
  const std::string fifo = testing::MakeTempDir() + "/started";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  UniqueFd started(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_TRUE(started.valid());
  const std::string script = "if [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then echo up > " + fifo + "; exec sleep 60; fi; exit 0";
  std::thread other_node([&] {
    pollfd p{started.get(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 30000), 1);  // bounded: the worker writes at once
    r->Running(1);
  });
  EXPECT_EQ(Run(Options(1, script), rounds), 0);
  other_node.join();
  EXPECT_TRUE(r->failure_rounds.empty());  // stopped by the job, not failed
  EXPECT_EQ(r->successes, std::vector<int64_t>{1});
}

TEST_F(AgentTest, AWorkerIgnoringSigtermIsKilledWhenTheInjectedClockPassesTheGrace) {
  ScriptedRounds rounds(2);
  ScriptedRounds* r = &rounds;
  auto offset = std::make_shared<Clock::duration>(Clock::duration::zero());
  AgentOptions o = Options(2, "[ $RANK = 1 ] && exit 3; trap '' TERM; while :; do sleep 1; done");
  o.shutdown_timeout = std::chrono::hours(1);
  o.now = [offset] { return Clock::now() + *offset; };
  r->on_failure = [r, offset](int64_t, const std::vector<rdzv::FailureInfo>& failures) {
    *offset += std::chrono::hours(2);  // an hour of grace passes at once
    r->Over(rdzv::JobPhase::kFailed, failures);
  };
  r->Running(0);
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(Run(std::move(o), rounds), 3);
  EXPECT_LT(Clock::now() - start, std::chrono::minutes(1));  // not the hour of real time
  EXPECT_EQ(r->first_failed_rank, std::vector<int>{1});
}

}  // namespace
}  // namespace dtrun

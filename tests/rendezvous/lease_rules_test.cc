#include "rendezvous/lease_rules.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun::rdzv {
namespace {

using ::dtrun::testing::StatusIs;
using ::testing::HasSubstr;
using ms = std::chrono::milliseconds;
using Next = LeaseRules::Next;

const LeaseRules::Clock::time_point t0 = LeaseRules::Clock::time_point() + std::chrono::hours(1);

LeaseRules Rules(int max_attempt = 3) { return LeaseRules({ms(1000), max_attempt, ms(2000)}, t0); }

TEST(LeaseRulesTest, AKeepAliveIsDueEveryIntervalAfterTheLastAnswer) {
  LeaseRules lease = Rules();
  EXPECT_EQ(lease.NextDue(false), t0 + ms(1000));
  EXPECT_EQ(lease.OnAnswer(absl::OkStatus(), t0 + ms(1030), false), Next::kContinue);
  EXPECT_EQ(lease.NextDue(false), t0 + ms(2030));  // from when it was answered, not when due
}

TEST(LeaseRulesTest, AWaitingStatusGoesAtOnceThenAtMostEveryPushInterval) {
  LeaseRules lease = Rules();
  EXPECT_LE(lease.NextDue(true), t0);  // never pushed: due now
  EXPECT_TRUE(lease.StatusGoesAt(t0));
  lease.OnAnswer(absl::OkStatus(), t0, /*with_status=*/true);
  EXPECT_EQ(lease.NextDue(true), t0 + ms(1000));  // the keep-alive comes first
  EXPECT_FALSE(lease.StatusGoesAt(t0 + ms(1000)));
  lease.OnAnswer(absl::OkStatus(), t0 + ms(1000), false);
  EXPECT_TRUE(lease.StatusGoesAt(t0 + ms(2000)));
}

TEST(LeaseRulesTest, TheServiceIsLostAfterMaxAttemptMissesInARow) {
  LeaseRules lease = Rules(3);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(1000), false), Next::kContinue);
  EXPECT_EQ(lease.OnAnswer(absl::DeadlineExceededError("slow"), t0 + ms(2000), false), Next::kContinue);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(3000), false), Next::kStop);
  EXPECT_THAT(lease.Verdict("head:29400"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("lost the rendezvous service (master) at head:29400: no answer for 3 s (3 "
                                 "keep-alives missed); stopping this node. A master started again in that time is "
                                 "joined again; --rdzv-conf keep_alive_max_attempt=N gives it longer")));
}

// A keep-alive goes sooner when a status is due, and an unreachable service fails it at once: the
// misses may come faster than the interval. The service is lost only after a whole lease without
// an answer, as the service counts a node's lease.
TEST(LeaseRulesTest, MissesInQuickSuccessionDoNotShortenTheLease) {
  LeaseRules lease = Rules(3);
  for (int at : {100, 200, 300, 2999}) {
    EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(at), true), Next::kContinue) << at;
  }
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(3000), false), Next::kStop);
  EXPECT_THAT(lease.Verdict("h:1"), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no answer for 3 s (5 keep")));
}

TEST(LeaseRulesTest, AnAnswerBetweenMissesStartsTheCountAgain) {
  LeaseRules lease = Rules(2);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(1000), false), Next::kContinue);
  EXPECT_EQ(lease.OnAnswer(absl::OkStatus(), t0 + ms(2000), false), Next::kContinue);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(3000), false), Next::kContinue);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(4000), false), Next::kStop);
  EXPECT_THAT(lease.Verdict("h:1"), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no answer for 2 s")));
}

// A keep-alive in flight while the node left (Ctrl-C, a preempted node) is answered NotFound: the
// service forgot it for leaving. Joining again made the other nodes re-form twice more.
TEST(LeaseRulesTest, ANodeThatLeftEndsItsKeepAlivesAndNeverJoinsAgain) {
  LeaseRules lease = Rules();
  EXPECT_EQ(lease.OnAnswer(absl::NotFoundError("unknown node"), t0 + ms(1000), false, /*left=*/true), Next::kEnd);
  EXPECT_EQ(lease.OnAnswer(absl::OkStatus(), t0 + ms(1000), false, /*left=*/true), Next::kEnd);
  EXPECT_EQ(lease.OnAnswer(absl::UnavailableError("down"), t0 + ms(1000), false, /*left=*/true), Next::kEnd);
}

TEST(LeaseRulesTest, AForgottenNodeJoinsAgainAndARefusalStopsAtOnce) {
  LeaseRules lease = Rules();
  EXPECT_EQ(lease.OnAnswer(absl::NotFoundError("unknown node"), t0 + ms(1000), false), Next::kRejoin);
  EXPECT_EQ(lease.OnAnswer(absl::UnauthenticatedError("wrong token"), t0 + ms(2000), false), Next::kStop);
  EXPECT_THAT(lease.Verdict("h:1"), StatusIs(absl::StatusCode::kUnauthenticated, "wrong token"));
  LeaseRules other = Rules();
  EXPECT_EQ(other.OnAnswer(absl::PermissionDeniedError("certificate"), t0, false), Next::kStop);
}

TEST(LeaseRulesTest, TheWatchWaitsTwoIntervalsAndReportsBackOffTo2s) {
  EXPECT_EQ(LeaseRules::WatchWait(ms(500)), ms(2000));
  EXPECT_EQ(LeaseRules::WatchWait(ms(5000)), ms(10000));
  EXPECT_EQ(LeaseRules::ReportRetryDelay(1), ms(100));
  EXPECT_EQ(LeaseRules::ReportRetryDelay(2), ms(200));
  EXPECT_EQ(LeaseRules::ReportRetryDelay(5), ms(1600));
  EXPECT_EQ(LeaseRules::ReportRetryDelay(6), ms(2000));
  EXPECT_EQ(LeaseRules::ReportRetryDelay(1000), ms(2000));
}

// A watch that failed (the service unavailable, most likely) asks again within gRPC's 1 s
// reconnect cap: a service started again is found then, whatever the keep-alive interval.
TEST(LeaseRulesTest, AWatchOfAnUnavailableServiceAsksAgainWithinASecond) {
  EXPECT_EQ(LeaseRules::WatchRetryDelay(1), ms(100));
  EXPECT_EQ(LeaseRules::WatchRetryDelay(4), ms(800));
  EXPECT_EQ(LeaseRules::WatchRetryDelay(5), ms(1000));
  EXPECT_EQ(LeaseRules::WatchRetryDelay(1 << 30), ms(1000));
  EXPECT_EQ(LeaseRules::WatchRetryDelay(0), ms(100));
}

}  // namespace
}  // namespace dtrun::rdzv

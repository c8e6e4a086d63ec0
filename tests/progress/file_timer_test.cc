#include "progress/file_timer.h"

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun::progress {
namespace {

TEST(FileTimerTest, TorchelasticRequestsParse) {
  // As torch.distributed.elastic.timer.FileTimerClient writes them.
  absl::StatusOr<TimerRequest> r = ParseTimerRequest(
      R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": 1795383753.5, "signal": 9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pid, 4242);
  EXPECT_EQ(r->scope_id, "step");
  EXPECT_EQ(r->signal, 9);
  absl::StatusOr<TimerRequest> release =
      ParseTimerRequest(R"({"version": 1, "pid": 4242, "scope_id": "step", "expiration_time": -1, "signal": 0})");
  ASSERT_TRUE(release.ok());
  EXPECT_LT(release->expiration_time, 0);
}

TEST(FileTimerTest, MalformedRequestsAreRefused) {
  for (const char* bad : {"", "[]", "{", R"({"pid": "1", "scope_id": "a", "expiration_time": 1})",
                          R"({"pid": 0, "scope_id": "a", "expiration_time": 1})",
                          R"({"pid": 1, "scope_id": 5, "expiration_time": 1})",
                          R"({"pid": 1, "scope_id": "a"})", R"({"pid": 1, "scope_id": "a", "expiration_time": 1, "signal": 99})",
                          R"({"pid": 1, "scope_id": "a", "expiration_time": 1, "signal": 1.5})"}) {
    EXPECT_THAT(ParseTimerRequest(bad), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                                    ::testing::Not(::testing::IsEmpty())))
        << bad;
  }
}

TEST(FileTimerTest, TimersExpireReleaseAndAreBounded) {
  FileTimers timers;
  EXPECT_TRUE(timers.Apply({10, "a", 100, 9}));
  EXPECT_TRUE(timers.Apply({10, "b", 50, 15}));
  EXPECT_TRUE(timers.Apply({11, "a", 200, 9}));
  EXPECT_EQ(*timers.NextExpiry(), 50);
  EXPECT_TRUE(timers.Apply({10, "b", -1, 0}));  // released
  EXPECT_EQ(*timers.NextExpiry(), 100);
  std::vector<TimerRequest> expired = timers.TakeExpired(150);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].pid, 10);
  EXPECT_EQ(timers.size(), 1u);
  for (int64_t i = 0; i < static_cast<int64_t>(kMaxTimers) + 10; ++i) timers.Apply({1000 + i, "x", 1e12, 9});
  EXPECT_EQ(timers.size(), kMaxTimers);
}

}  // namespace
}  // namespace dtrun::progress

#include "worker/capture_schedule.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

using Action = CaptureSchedule::Action;

// Runs the steps (image size, images) through the schedule, every capture working unless
// `captures_fail`; one letter a step: e(ager), b(eside the graph), c(apture), r(eplay), and a
// '|' before a step that drops the graph.
std::string Schedule(CaptureSchedule& s, const std::vector<std::pair<int, int>>& steps, int full_batch,
                     bool captures_fail = false) {
  std::string out;
  for (const auto& [size, count] : steps) {
    const CaptureSchedule::Decision d = s.Next(size, count, full_batch);
    if (d.drop_graph) out += '|';
    switch (d.action) {
      case Action::kEager: out += 'e'; break;
      case Action::kEagerBesideGraph: out += 'b'; break;
      case Action::kCapture:
        out += 'c';
        s.CaptureDone(!captures_fail);
        break;
      case Action::kReplay: out += 'r'; break;
    }
  }
  return out;
}

std::vector<std::pair<int, int>> Steps(int n, int size, int count) {
  return std::vector<std::pair<int, int>>(n, {size, count});
}

TEST(CaptureScheduleTest, FullBatchesWarmUpThenAreCapturedOnceAndReplayed) {
  CaptureSchedule s(/*graphs=*/true);
  EXPECT_EQ(Schedule(s, Steps(6, 224, 256), 256), "eeecrr");
  EXPECT_TRUE(s.has_graph());
}

TEST(CaptureScheduleTest, AnEpochsLastPartialBatchRunsEagerlyBesideTheGraphWhichIsKept) {
  CaptureSchedule s(true);
  std::vector<std::pair<int, int>> epoch = Steps(5, 224, 256);
  epoch.push_back({224, 100});
  EXPECT_EQ(Schedule(s, epoch, 256), "eeecrb");
  EXPECT_EQ(Schedule(s, epoch, 256), "rrrrrb");  // the next epoch replays from its first step
}

TEST(CaptureScheduleTest, APartialBatchBeforeAnyGraphRunsPlainlyEagerAndDoesNotCountAsWarmUp) {
  CaptureSchedule s(true);
  EXPECT_EQ(Schedule(s, {{224, 10}, {224, 256}, {224, 256}, {224, 256}, {224, 256}}, 256), "eeeec");
}

TEST(CaptureScheduleTest, ANewSizeDropsTheGraphAndWarmsUpAgain) {
  CaptureSchedule s(true);
  std::vector<std::pair<int, int>> steps = Steps(5, 128, 512);
  for (const auto& st : Steps(5, 224, 256)) steps.push_back(st);
  EXPECT_EQ(Schedule(s, steps, 512), "eeecr" "bbbbb");  // 256 is a partial batch while 512 is full
  EXPECT_EQ(Schedule(s, Steps(5, 224, 256), 256), "|eeecr");
}

TEST(CaptureScheduleTest, AFailedCaptureTurnsGraphsOffAndEveryStepRunsEagerly) {
  CaptureSchedule s(true);
  EXPECT_EQ(Schedule(s, Steps(6, 224, 256), 256, /*captures_fail=*/true), "eeecee");
  EXPECT_FALSE(s.graphs());
  EXPECT_FALSE(s.has_graph());
  EXPECT_EQ(Schedule(s, Steps(4, 160, 256), 256), "eeee");
}

TEST(CaptureScheduleTest, WithGraphsOffNothingIsCaptured) {
  CaptureSchedule s(false);
  EXPECT_EQ(Schedule(s, Steps(8, 224, 256), 256), "eeeeeeee");
}

}  // namespace
}  // namespace dtrun::worker

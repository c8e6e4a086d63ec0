// The buddy copies' duty cycle (replica/send_pacer.h).
#include "replica/send_pacer.h"

#include "gtest/gtest.h"

namespace dtrun::replica {
namespace {

TEST(SendPacerTest, AChunksPauseIsTakenBeforeTheNextChunkAndTheLastOneIsLeftOwed) {
  SendPacer p(0.25);
  EXPECT_DOUBLE_EQ(p.Sent(0.1, 0), 0) << "nothing owed before the first chunk";
  EXPECT_DOUBLE_EQ(p.Sent(0.1, 0), 0.3) << "the first chunk's pause: 3x its time at a 25% duty";
  // The copy ends: the last chunk's pause is owed by the next copy, not waited for now.
  EXPECT_DOUBLE_EQ(p.TakeOwed(), 0.3);
  EXPECT_DOUBLE_EQ(p.TakeOwed(), 0);
}

TEST(SendPacerTest, TimeSpentWaitingForACpuEarnsNoPause) {
  SendPacer p(0.25);
  p.Sent(0.5, 0.45);  // 0.05 s busy: the rest it waited behind the training for a CPU
  EXPECT_NEAR(p.TakeOwed(), 0.15, 1e-12);
  p.Sent(0.2, 0.3);  // more queued than wall (the look spans a little more): never negative
  EXPECT_DOUBLE_EQ(p.TakeOwed(), 0);
}

TEST(SendPacerTest, TheDutyIsClamped) {
  SendPacer full(2.0);
  full.Sent(1.0, 0);
  EXPECT_DOUBLE_EQ(full.TakeOwed(), 0) << "duty 1: no pause";
  SendPacer tiny(0);
  tiny.Sent(0.001, 0);
  EXPECT_NEAR(tiny.TakeOwed(), 0.999, 1e-9) << "duty 0.001 at least";
}

}  // namespace
}  // namespace dtrun::replica

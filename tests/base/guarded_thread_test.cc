#include "base/guarded_thread.h"

#include <new>
#include <stdexcept>
#include <thread>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

TEST(GuardedThreadTest, AnExceptionLeavingAThreadBecomesAStatusNotTerminate) {
  absl::Status seen;
  std::thread t([&] {
    RunGuarded("the test thread", [] { throw std::bad_alloc(); }, [&](const absl::Status& st) { seen = st; });
  });
  t.join();  // std::terminate would have ended the test binary here
  EXPECT_EQ(seen.code(), absl::StatusCode::kInternal);
  EXPECT_NE(seen.message().find("the test thread stopped: std::bad_alloc"), absl::string_view::npos) << seen;
}

TEST(GuardedThreadTest, ABodyThatReturnsReportsNothing) {
  bool called = false;
  int ran = 0;
  RunGuarded("body", [&] { ++ran; }, [&](const absl::Status&) { called = true; });
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(called);
  RunGuarded("body", [] { throw 42; }, [&](const absl::Status& st) { called = !st.ok(); });
  EXPECT_TRUE(called);
}

}  // namespace
}  // namespace dtrun

// A C++ worker's fatal signal (worker/crash_report.h): said on stderr with the function and the
// stack, and the process still dies of that signal. Each case runs in a death test's child.
#include "worker/crash_report.h"

#include <signal.h>

#include <cstdlib>
#include <thread>

#include "base/alt_signal_stack.h"
#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DTRUN_SANITIZED_TEST 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DTRUN_SANITIZED_TEST 1
#endif
#endif

// Not inlined, so the stack has each of them.
__attribute__((noinline)) void WriteThrough(volatile int* p) { *p = 1; }
__attribute__((noinline)) void LoadTheBatch(int i) {
  WriteThrough(reinterpret_cast<volatile int*>(static_cast<uintptr_t>(8 * i)));
  asm volatile("");  // keeps this frame: no tail call
}

volatile int deepest = 1 << 30;  // far past any thread's stack

__attribute__((noinline)) int Recurse(int depth) {
  volatile char pad[4096];
  pad[0] = static_cast<char>(depth);
  return depth < deepest ? Recurse(depth + 1) + pad[0] : 0;
}

class CrashReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef DTRUN_SANITIZED_TEST
    GTEST_SKIP() << "a sanitizer build reports fatal signals itself";
#endif
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(CrashReportTest, ASegfaultNamesTheAddressTheFunctionAndItsCallers) {
  EXPECT_EXIT(
      {
        InstallCrashReport();
        LoadTheBatch(1);
      },
      ::testing::KilledBySignal(SIGSEGV),
      "Fatal signal: SIGSEGV at address 0x8 in dtrun::worker::\\(anonymous namespace\\)::WriteThrough\\(\\)\n"
      "Stack \\(most recent call first\\):\n"
      "  #0 0x[0-9a-f]+ dtrun::worker::\\(anonymous namespace\\)::WriteThrough\\(\\)\n"
      "  #1 0x[0-9a-f]+ dtrun::worker::\\(anonymous namespace\\)::LoadTheBatch\\(\\)\n");
}

TEST_F(CrashReportTest, AnAbortIsReportedWithoutTheAbortsOwnFrameInItsFirstLine) {
  EXPECT_EXIT(
      {
        InstallCrashReport();
        std::abort();
      },
      ::testing::KilledBySignal(SIGABRT), "Fatal signal: SIGABRT\nStack \\(most recent call first\\):\n");
}

TEST_F(CrashReportTest, ASignalSentByAnotherProcessStillEndsTheProcess) {
  EXPECT_EXIT(
      {
        InstallCrashReport();
        ::raise(SIGBUS);
        std::exit(0);  // never reached: the signal is not swallowed
      },
      ::testing::KilledBySignal(SIGBUS), "Fatal signal: SIGBUS in ");
}

TEST_F(CrashReportTest, AStackOverflowIsReportedFromTheAlternateStack) {
  EXPECT_EXIT(
      {
        InstallCrashReport();
        Recurse(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "Fatal signal: SIGSEGV at address 0x[0-9a-f]+ in .*Recurse");
}

// A thread the program starts has no alternate stack of its own until it asks for one; without it
// the kernel killed the process at the overflow without a word.
TEST_F(CrashReportTest, AStackOverflowOnAThreadTheProgramStartedIsReported) {
  EXPECT_EXIT(
      {
        InstallCrashReport();
        std::thread loader([] {
          UseAlternateSignalStackOnThisThread();
          Recurse(0);
        });
        loader.join();
      },
      ::testing::KilledBySignal(SIGSEGV), "Fatal signal: SIGSEGV at address 0x[0-9a-f]+ in .*Recurse");
}

// Many short-lived threads (the snapshot copier starts one a snapshot): each frees its stack as it
// ends, switched off first, and a thread with one already keeps it.
TEST(AlternateSignalStackTest, EachThreadGetsItsOwnAndGivesItBackAtItsEnd) {
#ifdef DTRUN_SANITIZED_TEST
  GTEST_SKIP() << "ASan gives each thread an alternate stack of its own";
#endif
  for (int i = 0; i < 200; ++i) {
    std::thread([] {
      stack_t before{};
      ASSERT_EQ(::sigaltstack(nullptr, &before), 0);
      EXPECT_TRUE(before.ss_flags & SS_DISABLE);  // a new thread starts without one
      UseAlternateSignalStackOnThisThread();
      stack_t first{};
      ASSERT_EQ(::sigaltstack(nullptr, &first), 0);
      EXPECT_FALSE(first.ss_flags & SS_DISABLE);
      EXPECT_GE(first.ss_size, 64u << 10);
      UseAlternateSignalStackOnThisThread();
      stack_t second{};
      ASSERT_EQ(::sigaltstack(nullptr, &second), 0);
      EXPECT_EQ(second.ss_sp, first.ss_sp);
    }).join();
  }
}

}  // namespace
}  // namespace dtrun::worker

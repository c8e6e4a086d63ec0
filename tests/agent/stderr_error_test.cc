#include "agent/stderr_error.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kValueError[] =
    "Traceback (most recent call last):\n"
    "  File \"/job/train.py\", line 40, in <module>\n"
    "    main()\n"
    "  File \"/job/train.py\", line 31, in main\n"
    "    raise ValueError(\"bad batch\")\n"
    "ValueError: bad batch\n";

TEST(StderrErrorTest, AnUncaughtExceptionIsItsTracebackEvenWithWarningsPrintedAtExit) {
  const std::string tail = absl::StrCat(
      "epoch 1 loss 2.3\n", kValueError,
      "[W1128 00:01:02.000000000 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed\n");
  std::optional<StderrError> e = FindErrorInStderr(tail, /*cut=*/false, /*by_signal=*/false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "ValueError: bad batch");
  EXPECT_THAT(e->traceback, StartsWith("Traceback (most recent call last):\n  File \"/job/train.py\", line 40"));
  EXPECT_THAT(e->traceback, HasSubstr("ValueError: bad batch"));
  EXPECT_THAT(e->traceback, Not(HasSubstr("epoch 1")));
}

TEST(StderrErrorTest, ChainedExceptionsAreShownFromTheFirstAndNamedByTheLast) {
  const std::string tail = absl::StrCat(
      "a traceback the script caught and printed, then went on:\n", kValueError, "step 2\n",
      "Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\nZeroDivisionError: division by "
      "zero\n\n"
      "The above exception was the direct cause of the following exception:\n\n"
      "Traceback (most recent call last):\n  File \"t.py\", line 6, in <module>\nRuntimeError: multi\nline message\n");
  std::optional<StderrError> e = FindErrorInStderr(tail, false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "RuntimeError: multi");
  EXPECT_THAT(e->traceback, StartsWith("Traceback (most recent call last):\n  File \"t.py\", line 4"));
  EXPECT_THAT(e->traceback, EndsWith("RuntimeError: multi\nline message"));
  EXPECT_THAT(e->traceback, Not(HasSubstr("bad batch")));  // not chained to it: step 2 came between
}

TEST(StderrErrorTest, PyTorchsRankPrefixIsNotPartOfTheTraceback) {
  // PyTorch 2's excepthook after init_process_group: "[rankN]: " on every line but empty ones.
  const std::string tail =
      "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 4, in <module>\n"
      "[rank1]: KeyError: 7\n\n[rank1]: The above exception was the direct cause of the following exception:\n\n"
      "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"t.py\", line 6, in <module>\n"
      "[rank1]: ValueError: bad batch 7\n"
      "[rank1]:[W1128 00:01:02.000 ProcessGroupNCCL.cpp:1250] Warning: process group has NOT been destroyed\n";
  std::optional<StderrError> e = FindErrorInStderr(tail, false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "ValueError: bad batch 7");
  EXPECT_THAT(e->traceback,
              StartsWith("Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\nKeyError: 7"));
  EXPECT_THAT(e->traceback,
              HasSubstr("\nValueError: bad batch 7\n[rank1]:[W1128"));  // not a traceback line: as written
  // No rank number: not PyTorch's prefix, so no traceback either (only the last lines, as such).
  EXPECT_THAT(FindErrorInStderr("[rank]: Traceback (most recent call last):\n[rankx]: E: 1\n", false, false)->traceback,
              StartsWith("(no error file and no Python traceback;"));  // no rank number: not PyTorch's prefix
}

// rich's traceback handler (rich.traceback.install(width=60); rich 13.3's real output): each
// traceback in a box titled "Traceback (most recent call last)", the exception's line after it.
constexpr char kRichTraceback[] =
    "╭─────────── Traceback (most recent call last) ────────────╮\n"
    "│ /jobs/train.py:6 in load_batch                           │\n"
    "│                                                          │\n"
    "│    3 def load_batch(i):                                  │\n"
    "│    4 │   data = {}                                       │\n"
    "│    5 │   try:                                            │\n"
    "│ ❱  6 │   │   return data[i]                              │\n"
    "│    7 │   except KeyError as e:                           │\n"
    "│    8 │   │   raise ValueError(\"bad batch %d\" % i) from e │\n"
    "│    9 for i in range(10):                                 │\n"
    "╰──────────────────────────────────────────────────────────╯\n"
    "KeyError: 7\n"
    "\n"
    "The above exception was the direct cause of the following exception:\n"
    "\n"
    "╭─────────── Traceback (most recent call last) ────────────╮\n"
    "│ /jobs/train.py:11 in <module>                            │\n"
    "│                                                          │\n"
    "│    8 │   │   raise ValueError(\"bad batch %d\" % i) from e │\n"
    "│    9 for i in range(10):                                 │\n"
    "│   10 │   if i == 7:                                      │\n"
    "│ ❱ 11 │   │   load_batch(i)                               │\n"
    "│   12                                                     │\n"
    "│                                                          │\n"
    "│ /jobs/train.py:8 in load_batch                           │\n"
    "│                                                          │\n"
    "│    5 │   try:                                            │\n"
    "│    6 │   │   return data[i]                              │\n"
    "│    7 │   except KeyError as e:                           │\n"
    "│ ❱  8 │   │   raise ValueError(\"bad batch %d\" % i) from e │\n"
    "│    9 for i in range(10):                                 │\n"
    "│   10 │   if i == 7:                                      │\n"
    "│   11 │   │   load_batch(i)                               │\n"
    "╰──────────────────────────────────────────────────────────╯\n"
    "ValueError: bad batch 7\n";

TEST(StderrErrorTest, RichsBoxedTracebacksAreReadLikePythonsOwn) {
  std::optional<StderrError> e = FindErrorInStderr(absl::StrCat("epoch 0 step 6\n", kRichTraceback), false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "ValueError: bad batch 7");
  // The chain, from the first box.
  EXPECT_THAT(e->traceback, StartsWith("\xe2\x95\xad"));
  EXPECT_THAT(e->traceback, HasSubstr("KeyError: 7\n\nThe above exception was the direct cause"));
  EXPECT_THAT(e->traceback, EndsWith("ValueError: bad batch 7"));
  EXPECT_THAT(e->traceback, Not(HasSubstr("epoch 0")));
  // A box cut off before its end: the worker died while printing it.
  const std::string cut(kRichTraceback, std::string(kRichTraceback).rfind("\xe2\x95\xb0"));
  std::optional<StderrError> partial = FindErrorInStderr(cut, false, false);
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->message, "");
  EXPECT_THAT(partial->traceback, HasSubstr("load_batch(i)"));
}

TEST(StderrErrorTest, WithoutATracebackAtItsEndTheLastLinesAreShownAsSuch) {
  std::string tail = kValueError;
  for (int i = 0; i <= kMaxLinesAfterTheError; ++i) absl::StrAppend(&tail, "step ", i, "\n");
  std::optional<StderrError> e = FindErrorInStderr(tail, false, false);  // a caught exception's, long ago
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "");  // the last line need not be the error: the restart line does not show it
  EXPECT_THAT(e->traceback,
              StartsWith("(no error file and no Python traceback; the last lines of its stderr:)\nstep 31\n"));
  EXPECT_THAT(e->traceback, Not(HasSubstr("bad batch")));

  e = FindErrorInStderr("loading\ntrain_imagenet: data/train: no such folder\n\n  \n", false, false);  // a C++ trainer
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->traceback, EndsWith("loading\ntrain_imagenet: data/train: no such folder"));

  EXPECT_EQ(FindErrorInStderr("", false, false), std::nullopt);
  EXPECT_EQ(FindErrorInStderr("\n \n", false, false), std::nullopt);
  EXPECT_EQ(FindErrorInStderr("loss 0.9\n", false, /*by_signal=*/true), std::nullopt);  // a signal says more
}

// The C++ worker library's report of a fatal signal (worker/crash_report.h) is read as
// faulthandler's is: named by its first line, with the uncaught exception before an abort.
TEST(StderrErrorTest, TheWorkerLibrarysCrashReportIsReadAsFaulthandlersIs) {
  constexpr char kSegv[] =
      "Fatal signal: SIGSEGV at address 0x10 in app::Crash()\n"
      "Stack (most recent call first):\n"
      "  #0 0x55e53d8fd250 app::Crash()\n"
      "  #1 0x55e53d8fd26d app::Middle()\n";
  std::optional<StderrError> e = FindErrorInStderr(absl::StrCat("step 3\n", kSegv), false, /*by_signal=*/true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "Fatal signal: SIGSEGV at address 0x10 in app::Crash()");
  EXPECT_THAT(e->traceback, StartsWith("Fatal signal: SIGSEGV"));
  EXPECT_THAT(e->traceback, EndsWith("app::Middle()"));
  const std::string abort = absl::StrCat(
      "terminate called after throwing an instance of 'std::runtime_error'\n  what():  bad batch 7\n",
      "Fatal signal: SIGABRT\nStack (most recent call first):\n  #0 0x7f90476a8eec ?\n  #1 0x7f9047644472 abort\n");
  e = FindErrorInStderr(abort, false, true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "std::runtime_error: bad batch 7");
  EXPECT_THAT(e->traceback, StartsWith("terminate called after throwing"));
  EXPECT_THAT(e->traceback, EndsWith("abort"));
}

TEST(StderrErrorTest, ASignalsEndIsOnlyAFaulthandlerReportWithTheCppExceptionBeforeIt) {
  EXPECT_EQ(FindErrorInStderr(kValueError, false, /*by_signal=*/true), std::nullopt);  // an earlier, caught one
  const std::string tail = absl::StrCat(
      kValueError, "step 9\n",
      "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: an illegal memory access\n"
      "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call "
      "first):\n"
      "frame #0: c10::Error::Error() + 0x96\n\n"
      "Fatal Python error: Aborted\n\nThread 0x00007f (most recent call first):\n  File \"/job/train.py\", line 12 in "
      "step\n");
  std::optional<StderrError> e = FindErrorInStderr(tail, false, true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "c10::Error: CUDA error: an illegal memory access");  // what() says more than "Aborted"
  EXPECT_THAT(e->traceback,
              StartsWith("terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error"));
  EXPECT_THAT(e->traceback, EndsWith("  File \"/job/train.py\", line 12 in step"));
}

TEST(StderrErrorTest, AnAbortWithoutFaulthandlerIsTheCppExceptionsReport) {
  // NCCL's watchdog as PyTorch 2.x reports it, in a C++ program or with PYTHONFAULTHANDLER unset.
  const std::string tail =
      "[rank1]:[E1128 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout\n"
      "terminate called after throwing an instance of 'c10::DistBackendError'\n"
      "  what():  [PG 0 Rank 1] Process group watchdog thread terminated with exception: timeout\n"
      "Exception raised from checkTimeout at ProcessGroupNCCL.cpp:618 (most recent call first):\n"
      "frame #0: c10::Error::Error() + 0x96\n";
  std::optional<StderrError> e = FindErrorInStderr(tail, false, /*by_signal=*/true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message,
            "c10::DistBackendError: [PG 0 Rank 1] Process group watchdog thread terminated with exception: timeout");
  EXPECT_THAT(e->traceback, StartsWith("terminate called after throwing an instance of 'c10::DistBackendError'\n"));
  EXPECT_THAT(e->traceback, EndsWith("frame #0: c10::Error::Error() + 0x96"));
  // Without a what(), the report's own line; long ago, nothing.
  e = FindErrorInStderr("terminate called without an active exception\n", false, true);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "terminate called without an active exception");
  std::string old = "terminate called after throwing an instance of 'std::bad_alloc'\n";
  for (int i = 0; i < 300; ++i) absl::StrAppend(&old, "step ", i, "\n");
  EXPECT_EQ(FindErrorInStderr(old, false, true), std::nullopt);
}

TEST(StderrErrorTest, AChildsFatalReportBeforeTheWorkersOwnTracebackIsNotTheWorkersEnd) {
  const std::string tail =
      "Fatal Python error: Segmentation fault\n\nCurrent thread 0x01 (most recent call first):\n  File \"ds.py\", line "
      "3\n"
      "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
      "RuntimeError: DataLoader worker (pid 77) is killed by signal: Segmentation fault.\n";
  std::optional<StderrError> e = FindErrorInStderr(tail, false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "RuntimeError: DataLoader worker (pid 77) is killed by signal: Segmentation fault.");
  EXPECT_THAT(e->traceback, StartsWith("Traceback"));
}

TEST(StderrErrorTest, ReadsLinesAsATerminalShowsThemAndSkipsAPartialFirstLine) {
  // A progress bar's redraws on the line the traceback starts on; a tail that begins mid-line.
  std::optional<StderrError> e =
      FindErrorInStderr(absl::StrCat(" 50%|#####     |\r100%|##########|\r", kValueError), false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->traceback, StartsWith("Traceback"));
  EXPECT_EQ(FindErrorInStderr("Fatal Python error: half a line\nloss 1\n", /*cut=*/true, true), std::nullopt);
  EXPECT_NE(FindErrorInStderr("Fatal Python error: half a line\nloss 1\n", /*cut=*/false, true), std::nullopt);
  // Python 3.13's colours (FORCE_COLOR) are not part of the text.
  e = FindErrorInStderr(
      "\x1b[1;35mTraceback\x1b[0m (most recent call last):\n  File \x1b[35m\"x\"\x1b[0m\n"
      "\x1b[1;35mKeyError\x1b[0m: \x1b[35m'a'\x1b[0m\n\x1b[",
      false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "KeyError: 'a'");
  EXPECT_EQ(e->traceback, "Traceback (most recent call last):\n  File \"x\"\nKeyError: 'a'\n\x1b[");
  // Windows line ends.
  e = FindErrorInStderr("Traceback (most recent call last):\r\n  File \"x\"\r\nKeyError: 'a'\r\n", false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "KeyError: 'a'");
}

TEST(StderrErrorTest, AWorkerThatDiedWhilePrintingStillShowsWhatItPrinted) {
  std::optional<StderrError> e =
      FindErrorInStderr("Traceback (most recent call last):\n  File \"x.py\", line", false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "");
  EXPECT_EQ(e->traceback, "Traceback (most recent call last):\n  File \"x.py\", line");
}

TEST(StderrErrorTest, AHugeBlockKeepsItsEndAndSaysWhatWasCut) {
  std::string tail = "Traceback (most recent call last):\n";
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&tail, "  File \"deep.py\", line ", i, ", in recurse\n");
  absl::StrAppend(&tail, "RecursionError: maximum recursion depth exceeded\n", std::string(5000, 'x'), "\n");
  std::optional<StderrError> e = FindErrorInStderr(tail, false, false);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->traceback, StartsWith("[... "));
  EXPECT_LE(e->traceback.size(), kMaxStderrErrorBytes + 64);
  EXPECT_THAT(e->traceback, HasSubstr("RecursionError: maximum recursion depth exceeded"));
  EXPECT_EQ(e->message, "RecursionError: maximum recursion depth exceeded");
  // A one-line exception of 5 KB is named by its first 1 KiB.
  std::optional<StderrError> wide = FindErrorInStderr(
      absl::StrCat("Traceback (most recent call last):\nE: ", std::string(5000, 'y'), "\n"), false, false);
  ASSERT_TRUE(wide.has_value());
  EXPECT_EQ(wide->message.size(), 1024u + 3);
}

}  // namespace
}  // namespace dtrun

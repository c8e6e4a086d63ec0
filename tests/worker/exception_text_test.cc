// An exception that ends a C++ trainer, said as Python says its last traceback line: the type,
// then what it says; LibTorch's C++ frames go to the call stack, not into the message.
#include "worker/exception_text.h"

#include <torch/torch.h>

#include <new>
#include <stdexcept>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

TEST(ExceptionTextTest, AStandardExceptionIsItsTypeAndWhat) {
  ExceptionText t = DescribeException(std::runtime_error("bad batch 7"));
  EXPECT_EQ(t.message, "std::runtime_error: bad batch 7");
  EXPECT_TRUE(t.callstack.empty());
  EXPECT_EQ(DescribeException(std::bad_alloc()).message, "std::bad_alloc");  // not "std::bad_alloc: std::bad_alloc"
}

TEST(ExceptionTextTest, ALibTorchErrorKeepsItsFramesOutOfTheMessage) {
  try {
    TORCH_CHECK(false, "shapes differ: 3 vs 4");
    FAIL() << "TORCH_CHECK did not throw";
  } catch (const std::exception& e) {
    ExceptionText t = DescribeException(e);
    EXPECT_EQ(t.message.rfind("c10::Error: ", 0), 0u) << t.message;
    EXPECT_NE(t.message.find("shapes differ: 3 vs 4"), std::string::npos) << t.message;
    EXPECT_EQ(t.message.find("Exception raised from"), std::string::npos) << t.message;
    EXPECT_NE(t.callstack.find("shapes differ: 3 vs 4"), std::string::npos) << t.callstack;
  }
}

TEST(ExceptionTextTest, ALongWhatIsCut) {
  ExceptionText t = DescribeException(std::runtime_error(std::string(100000, 'x')));
  EXPECT_EQ(t.message.size(), kMaxMessageBytes);
}

}  // namespace
}  // namespace dtrun::worker

#include "base/untrusted_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

TEST(UntrustedFileTest, ReadsSmallRegularFilesAndRefusesEverythingElse) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/ok") << "bytes";
  std::ofstream(dir + "/big") << std::string(101, 'x');
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink((dir + "/ok").c_str(), (dir + "/link").c_str()), 0);
  EXPECT_EQ(*ReadUntrustedFile(dir + "/ok", 100), "bytes");
  EXPECT_EQ(ReadUntrustedFile(dir + "/big", 100).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ReadUntrustedFile(dir + "/fifo", 100).status().code(), absl::StatusCode::kFailedPrecondition);  // no hang
  EXPECT_EQ(ReadUntrustedFile(dir, 100).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadUntrustedFile(dir + "/link", 100).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadUntrustedFile(dir + "/missing", 100).status().code(), absl::StatusCode::kNotFound);
}

TEST(UntrustedFileTest, ReadsKernelFilesWhoseSizeReadsAsZeroToTheirEndWithinTheBound) {
  absl::StatusOr<std::string> status = ReadUntrustedFile("/proc/self/status", 1 << 20);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("Pid:"), std::string::npos) << *status;
  EXPECT_EQ(ReadUntrustedFile("/proc/self/status", 16).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace dtrun

// The NVML probe behind `dtrun status`'s GPU columns, against a stand-in library
// (tests/support/fake_nvml.cc): the real one needs NVIDIA's driver, which only scripts/gpu-check.sh
// has (its status_gpu row).
#include "status/gpu_probe.h"

#include <stdlib.h>

#include "gtest/gtest.h"

namespace dtrun::status {
namespace {

std::unique_ptr<GpuProbe> OpenFake(const char* gpus) {
  ::setenv("FAKE_NVML_GPUS", gpus, 1);
  return GpuProbe::Open(DTRUN_FAKE_NVML);
}

TEST(GpuProbeTest, EachWorkerGetsTheUtilisationAndMemoryOfTheGpuWhereItHoldsMost) {
  // pid 100 holds 2 GiB on GPU 0 and a little on GPU 1; 300's memory is not available (MIG, or
  // NVML without the permission); 500 is someone else's process.
  std::unique_ptr<GpuProbe> probe = OpenFake("80:100=2147483648,200=1073741824,500=1;10:100=10485760,300=-");
  ASSERT_NE(probe, nullptr);
  std::map<pid_t, GpuUsage> usage = probe->Sample({100, 200, 300, 400});
  ASSERT_EQ(usage.size(), 3u);  // 400 holds no GPU; 500 was not asked about
  EXPECT_EQ(usage[100].util_percent, 80);
  EXPECT_EQ(usage[100].mem_bytes, int64_t{2} << 30);
  EXPECT_EQ(usage[200].util_percent, 80);
  EXPECT_EQ(usage[200].mem_bytes, int64_t{1} << 30);
  EXPECT_EQ(usage[300].util_percent, 10);
  EXPECT_EQ(usage[300].mem_bytes, -1);
}

// Before, `has_util ? util.gpu : -1` was unsigned: a GPU without utilisation showed 4294967295%.
TEST(GpuProbeTest, AGpuWithoutUtilisationStillGivesItsMemory) {
  std::unique_ptr<GpuProbe> probe = OpenFake("-:7=4096");
  ASSERT_NE(probe, nullptr);
  std::map<pid_t, GpuUsage> usage = probe->Sample({7});
  EXPECT_EQ(usage[7].util_percent, -1);
  EXPECT_EQ(usage[7].mem_bytes, 4096);
}

// More processes than the first buffer holds: NVML writes none and says how many; the probe asks
// again with room for them. Before, it read the previous GPU's entries as this one's.
TEST(GpuProbeTest, AGpuWithManyProcessesIsAskedAgainWithRoomForThem) {
  std::unique_ptr<GpuProbe> probe = OpenFake("50:42=1000;60:+300");
  ASSERT_NE(probe, nullptr);
  std::map<pid_t, GpuUsage> usage = probe->Sample({42, 100000, 100299});
  EXPECT_EQ(usage[42].util_percent, 50);  // GPU 0's process, not also GPU 1's
  EXPECT_EQ(usage[42].mem_bytes, 1000);
  EXPECT_EQ(usage[100000].util_percent, 60);
  EXPECT_EQ(usage[100299].util_percent, 60);
}

TEST(GpuProbeTest, NoLibraryOrAFailedInitialisationIsNoProbe) {
  EXPECT_EQ(GpuProbe::Open("libdtrun-no-such-nvml.so.1"), nullptr);
  ::setenv("FAKE_NVML_INIT", "fail", 1);
  EXPECT_EQ(OpenFake("80:1=1"), nullptr);
  ::unsetenv("FAKE_NVML_INIT");
}

}  // namespace
}  // namespace dtrun::status

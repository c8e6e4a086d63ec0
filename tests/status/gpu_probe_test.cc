// The probes behind `dtrun status`'s GPU columns: NVML's against a stand-in library
// (tests/support/fake_nvml.cc; the real one needs NVIDIA's driver, which only scripts/gpu-check.sh
// has, in its status_gpu row), and the KFD's on a fake sysfs root.
#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "status/kfd_probe.h"
#include "status/nvml_probe.h"
#include "tests/support/fake_root.h"

namespace dtrun::status {
namespace {

std::unique_ptr<GpuProbe> OpenFake(const char* gpus) {
  ::setenv("FAKE_NVML_GPUS", gpus, 1);
  return NvmlProbe::Open(DTRUN_FAKE_NVML);
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
  EXPECT_EQ(NvmlProbe::Open("libdtrun-no-such-nvml.so.1"), nullptr);
  ::setenv("FAKE_NVML_INIT", "fail", 1);
  EXPECT_EQ(OpenFake("80:1=1"), nullptr);
  ::unsetenv("FAKE_NVML_INIT");
}

// An 8-GPU ROCm node: KFD node 0 is the CPU, nodes 1-8 the GPUs (gpu_id as the driver makes them
// up, render minors 128 on). A worker holds memory on every GPU it opened, most on its own.
void MakeRocmNode(const testing::FakeRoot& root) {
  const std::string nodes = "/sys/class/kfd/kfd/topology/nodes/";
  root.Write(nodes + "0/properties", "cpu_cores_count 96\nsimd_count 0\n");
  root.Write(nodes + "0/gpu_id", "0\n");
  for (int node = 1; node <= 8; ++node) {
    root.Write(absl::StrCat(nodes, node, "/properties"),
               absl::StrCat("simd_count 1216\nlocation_id ", node << 8, "\ndrm_render_minor ", 127 + node, "\n"));
    root.Write(absl::StrCat(nodes, node, "/gpu_id"), absl::StrCat(40000 + node, "\n"));
    root.Write(absl::StrCat("/sys/class/drm/renderD", 127 + node, "/device/gpu_busy_percent"),
               absl::StrCat(node * 10, "\n"));
  }
}

TEST(KfdProbeTest, EachWorkerGetsTheBusyPercentAndMemoryOfTheAmdGpuWhereItHoldsMost) {
  testing::FakeRoot root;
  MakeRocmNode(root);
  const std::string proc = "/sys/class/kfd/kfd/proc/";
  root.Write(proc + "100/vram_40003", "17179869184\n");  // rank 0 on GPU 3 (node 3)
  root.Write(proc + "100/vram_40001", "4096\n");         // and the runtime's bit on GPU 1
  root.Write(proc + "200/vram_40008", "1024\n");
  root.Write(proc + "300/vram_40002", "garbage\n");  // a file that is not a number counts for nothing
  std::unique_ptr<GpuProbe> probe = KfdProbe::Open(root.root());
  ASSERT_NE(probe, nullptr);
  std::map<pid_t, GpuUsage> usage = probe->Sample({100, 200, 300, 400});
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[100].mem_bytes, int64_t{16} << 30);
  EXPECT_EQ(usage[100].util_percent, 30);
  EXPECT_EQ(usage[200].mem_bytes, 1024);
  EXPECT_EQ(usage[200].util_percent, 80);
  // A device that stops saying how busy it is (a reset under way): memory still, busy unknown.
  root.Write("/sys/class/drm/renderD135/device/gpu_busy_percent", "");
  usage = probe->Sample({200});
  EXPECT_EQ(usage[200].mem_bytes, 1024);
  EXPECT_EQ(usage[200].util_percent, -1);
}

TEST(KfdProbeTest, AMachineWithoutRocmGpusHasNoProbe) {
  testing::FakeRoot root;
  EXPECT_EQ(KfdProbe::Open(root.root()), nullptr);
  root.Write("/sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 8\nsimd_count 0\n");
  EXPECT_EQ(KfdProbe::Open(root.root()), nullptr);  // a CPU node only (an APU's driver without its GPU)
}

}  // namespace
}  // namespace dtrun::status

#include "launcher/device_count.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/launch_config.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<std::string> kEight = {"GPU-0a1", "GPU-1b2", "GPU-2c3", "GPU-3d4",
                                         "GPU-4e5", "GPU-5f6", "GPU-6a7", "GPU-7b8"};

std::vector<PciGpu> GpusWithUuids(const std::vector<std::string>& uuids) {
  std::vector<PciGpu> gpus;
  for (const std::string& uuid : uuids) gpus.push_back(PciGpu{uuid, "", -1});
  return gpus;
}

TEST(DeviceCountTest, VisibleListsAreReadAsCudaReadsThem) {
  EXPECT_EQ(VisibleEntries("0,3", kEight), 2);
  EXPECT_EQ(VisibleEntries(" 4 , 5 ,6", kEight), 3);
  EXPECT_EQ(VisibleEntries("", kEight), 0);        // nothing visible
  EXPECT_EQ(VisibleEntries("-1", kEight), 0);      // the usual way to hide every GPU
  EXPECT_EQ(VisibleEntries("0,2,-1,1", kEight), 2);  // stops at the first invalid entry
  EXPECT_EQ(VisibleEntries("1,9,2", kEight), 1);   // 9 is out of range
  EXPECT_EQ(VisibleEntries("2,2,3", kEight), 1);   // a repeat stops the list
  EXPECT_EQ(VisibleEntries("GPU-3d4,GPU-0", kEight), 2);  // UUIDs and unique prefixes
  EXPECT_EQ(VisibleEntries("GPU-", kEight), 0);    // a prefix of every UUID names none
  EXPECT_EQ(VisibleEntries("GPU-3d4,3", kEight), 1);  // the same GPU twice
  EXPECT_EQ(VisibleEntries("MIG-aa,MIG-bb", kEight), 2);  // MIG instances cannot be checked here
  EXPECT_EQ(VisibleEntries("nvidia0", kEight), 0);
}

TEST(DeviceCountTest, NvidiaGpusAreNarrowedByCudaVisibleDevicesAndSaySo) {
  AcceleratorInventory host;
  host.nvidia = GpusWithUuids(kEight);
  DeviceCount all = CountVisibleDevices(DeviceKind::kNvidia, host, {});
  EXPECT_EQ(all.count, 8);
  EXPECT_EQ(all.source, "8 NVIDIA GPUs in /proc/driver/nvidia/gpus");
  DeviceCount slurm = CountVisibleDevices(DeviceKind::kNvidia, host, {{"CUDA_VISIBLE_DEVICES", "0,3"}});
  EXPECT_EQ(slurm.count, 2);
  EXPECT_EQ(slurm.source, "CUDA_VISIBLE_DEVICES=0,3 of 8 NVIDIA GPUs in /proc/driver/nvidia/gpus");
}

TEST(DeviceCountTest, RocmAppliesRocrThenHipAndIntelItsAffinityMask) {
  AcceleratorInventory host;
  host.amd = GpusWithUuids(std::vector<std::string>(8));
  host.intel_gpus = 2;
  EXPECT_EQ(CountVisibleDevices(DeviceKind::kAmd, host, {}).count, 8);
  // HIP's indices are into what ROCR left: "3" of four is invalid.
  EXPECT_EQ(CountVisibleDevices(DeviceKind::kAmd, host, {{"ROCR_VISIBLE_DEVICES", "4,5,6,7"}, {"HIP_VISIBLE_DEVICES", "0,3"}}).count,
            2);
  EXPECT_EQ(CountVisibleDevices(DeviceKind::kAmd, host, {{"ROCR_VISIBLE_DEVICES", "4,5"}, {"HIP_VISIBLE_DEVICES", "0,3"}}).count,
            1);
  // HIP reads CUDA_VISIBLE_DEVICES only where HIP_VISIBLE_DEVICES is not set.
  EXPECT_EQ(
      CountVisibleDevices(DeviceKind::kAmd, host, {{"HIP_VISIBLE_DEVICES", "0,1,2"}, {"CUDA_VISIBLE_DEVICES", "0"}})
          .count,
      3);
  EXPECT_EQ(CountVisibleDevices(DeviceKind::kAmd, host, {{"CUDA_VISIBLE_DEVICES", "5"}}).count, 1);
  EXPECT_EQ(CountVisibleDevices(DeviceKind::kIntel, host, {}).count, 2);
  DeviceCount tiles = CountVisibleDevices(DeviceKind::kIntel, host, {{"ZE_AFFINITY_MASK", "0.0,0.1,1.0"}});
  EXPECT_EQ(tiles.count, 3);
  EXPECT_THAT(tiles.source, HasSubstr("ZE_AFFINITY_MASK=0.0,0.1,1.0"));
}

// Which physical GPU each of the workers' devices is: what --numa-binding places them by.
TEST(DeviceCountTest, VisibleGpusAreMappedBackToTheDriversNumbering) {
  AcceleratorInventory host;
  host.nvidia = GpusWithUuids(kEight);
  host.amd = GpusWithUuids(std::vector<std::string>(8));
  EXPECT_THAT(FindVisibleGpus(DeviceKind::kNvidia, host, {}).physical, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(FindVisibleGpus(DeviceKind::kNvidia, host, {{"CUDA_VISIBLE_DEVICES", "GPU-7b,2,MIG-x"}}).physical,
              ElementsAre(7, 2, -1));
  // ROCR keeps physical 6, 4 and 2 (in that order); HIP's 2,0 are of those.
  VisibleGpus rocm =
      FindVisibleGpus(DeviceKind::kAmd, host, {{"ROCR_VISIBLE_DEVICES", "6,4,2"}, {"HIP_VISIBLE_DEVICES", "2,0"}});
  EXPECT_THAT(rocm.physical, ElementsAre(2, 6));
  EXPECT_EQ(rocm.source, "HIP_VISIBLE_DEVICES=2,0 of ROCR_VISIBLE_DEVICES=6,4,2 of 8 AMD GPUs in /sys/class/kfd");
  // A UUID cannot be placed: AMD's are not read.
  EXPECT_THAT(FindVisibleGpus(DeviceKind::kAmd, host, {{"ROCR_VISIBLE_DEVICES", "GPU-4a5b,1"}}).physical,
              ElementsAre(-1, 1));
}

class Host final : public HostProbe {
 public:
  AcceleratorInventory inventory;
  AcceleratorInventory Accelerators() const override { return inventory; }
  int CpuCount() const override { return 32; }
  CpuTopology Cpus() const override { return {}; }
  absl::StatusOr<std::string> FindExecutable(const std::string&) const override { return "/bin/true"; }
  bool Readable(const std::string&) const override { return true; }
  std::optional<std::string> InterfaceWithAddress(const std::string&) const override { return std::nullopt; }
  std::optional<std::string> LocalAddressFacing(const std::string&, int) const override { return std::nullopt; }
  bool IsThisHost(const std::string&) const override { return true; }
  std::string ThisExecutable() const override { return "/opt/dtrun/bin/dtrun"; }
  std::string WorkingDirectory() const override { return "/home/me/job"; }
};

TEST(NprocPerNodeTest, GpuCudaXpuAndAutoCountWhatTheWorkersWillSee) {
  Host host;
  host.inventory.nvidia = GpusWithUuids(kEight);
  const std::map<std::string, std::string> slurm = {{"CUDA_VISIBLE_DEVICES", "2,5"}};
  for (const char* value : {"gpu", "cuda", "auto"}) {
    absl::StatusOr<NprocPerNode> n = ParseNprocPerNode(value, host, slurm);
    ASSERT_TRUE(n.ok()) << value << ": " << n.status();
    EXPECT_EQ(n->count, 2) << value;
    EXPECT_THAT(n->counted, HasSubstr("CUDA_VISIBLE_DEVICES=2,5 of 8 NVIDIA GPUs")) << value;
  }
  // Every GPU hidden: gpu is an error naming why, auto falls back to the cores (as torchrun).
  const std::map<std::string, std::string> hidden = {{"CUDA_VISIBLE_DEVICES", ""}};
  EXPECT_THAT(ParseNprocPerNode("gpu", host, hidden),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CUDA_VISIBLE_DEVICES= of 8 NVIDIA GPUs")));
  absl::StatusOr<NprocPerNode> cores = ParseNprocPerNode("auto", host, hidden);
  ASSERT_TRUE(cores.ok());
  EXPECT_EQ(cores->count, 32);
  EXPECT_THAT(cores->counted, HasSubstr("no accelerator visible"));
  // ROCm's PyTorch calls AMD GPUs "cuda"; Intel's are xpu.
  host.inventory = {};
  host.inventory.amd = GpusWithUuids(std::vector<std::string>(4));
  host.inventory.intel_gpus = 1;
  EXPECT_EQ(ParseNprocPerNode("gpu", host, {{"HIP_VISIBLE_DEVICES", "1,2,3"}})->count, 3);
  EXPECT_EQ(ParseNprocPerNode("xpu", host, {})->count, 1);
  EXPECT_EQ(ParseNprocPerNode("7", host, {})->counted, "");
  EXPECT_THAT(ParseNprocPerNode("tpu", host, {}),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu, gpu, cuda, xpu or auto")));
  EXPECT_THAT(ParseNprocPerNode("0", host, {}),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a positive integer")));
}

}  // namespace
}  // namespace dtrun

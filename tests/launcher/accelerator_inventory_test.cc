#include "launcher/accelerator_inventory.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fake_root.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

auto IsGpu(const std::string& uuid, const std::string& bus_id, int numa_node) {
  return ::testing::AllOf(Field(&PciGpu::uuid, uuid), Field(&PciGpu::bus_id, bus_id),
                          Field(&PciGpu::numa_node, numa_node));
}

TEST(AcceleratorInventoryTest, NvidiaGpusComeInPciOrderWithTheirUuidAndNumaNode) {
  testing::FakeRoot root;
  root.Write(
      "/proc/driver/nvidia/gpus/0000:b1:00.0/information",
      "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 310\nGPU UUID: \t GPU-9c1e\nBus Location: \t 0000:b1:00.0\n");
  root.Write("/sys/bus/pci/devices/0000:b1:00.0/numa_node", "1\n");
  root.Write("/proc/driver/nvidia/gpus/0000:1b:00.0/information", "Model: \t\t NVIDIA H100\n");  // no UUID line
  root.Write("/sys/bus/pci/devices/0000:1b:00.0/numa_node", "-1\n");
  AcceleratorInventory inventory = ReadAcceleratorInventory(root.root());
  EXPECT_THAT(inventory.nvidia, ElementsAre(IsGpu("", "0000:1b:00.0", -1), IsGpu("GPU-9c1e", "0000:b1:00.0", 1)));
  EXPECT_TRUE(inventory.amd.empty());
  EXPECT_EQ(inventory.intel_gpus, 0);
}

// The KFD numbers CPU nodes and GPU nodes alike; ROCm's devices are the GPU nodes in numeric order
// ("10" after "9"), a partitioned GPU once per partition.
TEST(AcceleratorInventoryTest, AmdGpusComeInKfdNodeOrderWithThePciAddressTheirLocationIdGives) {
  testing::FakeRoot root;
  const std::string nodes = "/sys/class/kfd/kfd/topology/nodes/";
  root.Write(nodes + "0/properties", "cpu_cores_count 64\nsimd_count 0\nlocation_id 0\ndomain 0\n");
  for (int node = 1; node <= 10; ++node) {
    const int bus = node <= 9 ? 0x10 * node : 0xc3;  // node 10 is a second partition of bus c3's GPU
    root.Write(absl::StrCat(nodes, node, "/properties"),
               absl::StrCat("cpu_cores_count 0\nsimd_count 304\nlocation_id ", (node == 9 ? 0xc3 : bus) << 8,
                            "\ndrm_render_minor ", 127 + node, "\ndomain 0\n"));
  }
  root.Write("/sys/bus/pci/devices/0000:c3:00.0/numa_node", "1\n");
  root.Write("/sys/bus/pci/devices/0000:10:00.0/numa_node", "0\n");
  root.Write(nodes + "11/properties", "simd_count 304\nlocation_id 65537\n");          // not a PCI devfn
  root.Write(nodes + "12/properties", "simd_count 80\nlocation_id 2571\ndomain 2\n");  // 0x0a0b: 0a:01.3
  root.Write(nodes + "generation_id", "1\n");
  AcceleratorInventory inventory = ReadAcceleratorInventory(root.root());
  ASSERT_EQ(inventory.amd.size(), 12u);
  EXPECT_THAT(inventory.amd[0], IsGpu("", "0000:10:00.0", 0));
  EXPECT_THAT(inventory.amd[1], IsGpu("", "0000:20:00.0", -1));
  EXPECT_THAT(inventory.amd[8], IsGpu("", "0000:c3:00.0", 1));
  EXPECT_THAT(inventory.amd[9], IsGpu("", "0000:c3:00.0", 1));
  EXPECT_THAT(inventory.amd[10], IsGpu("", "", -1));
  EXPECT_THAT(inventory.amd[11], IsGpu("", "0002:0a:01.3", -1));
}

TEST(AcceleratorInventoryTest, IntelGpusAreRenderNodesOfIntelsVendorId) {
  testing::FakeRoot root;
  root.Write("/sys/class/drm/renderD128/device/vendor", "0x8086\n");
  root.Write("/sys/class/drm/renderD129/device/vendor", "0x10de\n");
  root.Write("/sys/class/drm/card0/device/vendor", "0x8086\n");
  EXPECT_EQ(ReadAcceleratorInventory(root.root()).intel_gpus, 1);
}

TEST(AcceleratorInventoryTest, AMachineWithoutDriversHasNoAccelerators) {
  testing::FakeRoot root;
  AcceleratorInventory inventory = ReadAcceleratorInventory(root.root());
  EXPECT_TRUE(inventory.nvidia.empty());
  EXPECT_TRUE(inventory.amd.empty());
  EXPECT_EQ(inventory.intel_gpus, 0);
}

}  // namespace
}  // namespace dtrun

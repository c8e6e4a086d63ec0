// PyTorch 2.x clients (Debian trixie's torch 2.6, in the trixie chroot that
// ../shared/tools/trixie-chroot sets up, with python3-torch-cuda added) against dtrun's store: the
// workers run `chroot ROOT python3 ...` under the real dtrun. Skipped where that root is absent.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

// The trixie root holding torch 2.x for Python ("" if none): $TRIXIE_ROOT, else the CUDA or the
// plain root the shared tool makes.
std::string TrixieTorchRoot() {
  std::vector<std::string> roots;
  if (const char* env = std::getenv("TRIXIE_ROOT")) roots.push_back(env);
  roots.push_back("/var/tmp/trixie-cuda-root");
  roots.push_back("/var/tmp/trixie-root");
  for (const std::string& root : roots) {
    if (std::filesystem::exists(root + "/usr/lib/python3/dist-packages/torch/__init__.py")) return root;
  }
  return "";
}

TEST(Torch2xStoreTest, TorchTwoSixClientsRunEveryStoreRequestThroughTheAgentStore) {
  const std::string root = TrixieTorchRoot();
  if (root.empty() || ::geteuid() != 0) {
    GTEST_SKIP() << "needs root and a trixie chroot with python3-torch (../shared/tools/trixie-chroot setup, then "
                    "apt-get install python3-torch-cuda in it)";
  }
  // The chroot needs /proc for Python; the shared tool mounts it too.
  RunToEnd({"/bin/sh", "-c", "mountpoint -q " + root + "/proc || mount -t proc proc " + root + "/proc"});
  const std::string name = "/tmp/dtrun_store_ops_2x_" + std::to_string(::getpid()) + ".py";
  std::filesystem::copy_file(Worker("store_ops_2x.py"), root + name, std::filesystem::copy_options::overwrite_existing);
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--no-python", "chroot", root, "python3", name});
  std::filesystem::remove(root + name);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("STORE2X_OK 0 2."), std::string::npos) << out;
  EXPECT_NE(out.find("STORE2X_OK 1 2."), std::string::npos) << out;
  EXPECT_EQ(out.find("broke the TCPStore protocol"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing

// PyTorch 2.x clients against dtrun's store: Debian trixie's python3-torch 2.6 in a trixie root
// (scripts/trixie-torch-root.sh makes it once per build directory; $TRIXIE_ROOT names another),
// its workers started by the real dtrun as `chroot ROOT python3 ...`, each from a private mount
// namespace that mounts the root's /proc and goes with it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

// The trixie root with torch 2.x for Python ("" if none): $TRIXIE_ROOT, else the one
// scripts/trixie-torch-root.sh made for this build (CTest's Torch2xRoot.Make runs it first).
std::string TrixieTorchRoot() {
  if (const char* env = std::getenv("TRIXIE_ROOT"); env && *env) return env;
  const std::string made = BinDir() + "/../package-test/trixie-torch";
  return std::filesystem::exists(made + "/.complete") ? made : "";
}

TEST(Torch2xStoreTest, TorchTwoSixClientsRunEveryStoreRequestThroughTheAgentStore) {
  const std::string root = TrixieTorchRoot();
  if (root.empty() || ::geteuid() != 0) {
    GTEST_SKIP() << "needs root and a trixie root with python3-torch (scripts/trixie-torch-root.sh BUILD_DIR, which "
                    "CTest's Torch2xRoot.Make runs where it can)";
  }
  ASSERT_TRUE(std::filesystem::exists(root + "/usr/lib/python3/dist-packages/torch/__init__.py")) << root;
  const std::string name = "/tmp/dtrun_store_ops_2x_" + std::to_string(::getpid()) + ".py";
  std::filesystem::copy_file(Worker("store_ops_2x.py"), root + name, std::filesystem::copy_options::overwrite_existing);
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--no-python", "unshare", "--mount",
                             "--propagation", "private", "sh", "-c",
                             "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 \"$1\"", root, name});
  std::filesystem::remove(root + name);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("STORE2X_OK 0 2."), std::string::npos) << out;
  EXPECT_NE(out.find("STORE2X_OK 1 2."), std::string::npos) << out;
  EXPECT_EQ(out.find("broke the TCPStore protocol"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing

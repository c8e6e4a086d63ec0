// PyTorch 2.x clients against dtrun's store and its Python module: Debian trixie's python3-torch
// 2.6 in a trixie root (scripts/trixie-torch-root.sh makes it once per build directory;
// $TRIXIE_ROOT names another), its workers started by the real dtrun as `chroot ROOT python3 ...`,
// each from a private mount namespace that mounts the root's /proc and goes with it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

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

// dtrun.snapshot's snapshots on failure under torch 2.6, whose optimizers dtrun watches through
// PyTorch 2's global step hooks: rank 1 dies after step 23, rank 0 keeps step 23 on its way out,
// and the job resumes there with the parameters of a run that never failed. The workers see the
// host's /tmp (the agent's sockets, the script) and dtrun's Python package at /mnt.
TEST(Torch2xStoreTest, TorchTwoSixScriptsLoseNoStepWhenAPeerDies) {
  const std::string root = TrixieTorchRoot();
  if (root.empty() || ::geteuid() != 0) {
    GTEST_SKIP() << "needs root and a trixie root with python3-torch (scripts/trixie-torch-root.sh BUILD_DIR, which "
                    "CTest's Torch2xRoot.Make runs where it can)";
  }
  const std::string script = MakeTempDir() + "/snapshot_resume.py";
  std::filesystem::copy_file(Worker("snapshot_resume.py"), script);
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                     "--snapshot-every", "5", "--no-python", "unshare", "--mount", "--propagation",
                                     "private", "sh", "-c",
                                     "root=$0 package=$1 script=$2; shift 2; mount -t proc proc \"$root/proc\" && "
                                     "mount --bind /tmp \"$root/tmp\" && mount --bind \"$package\" \"$root/mnt\" && "
                                     "PYTHONPATH=/mnt exec chroot \"$root\" python3 \"$script\" 40 --no-libuv \"$@\"",
                                     root, BinDir() + "/../lib/dtrun/python", script};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunToEnd(argv);
  };
  auto [clean_rc, clean] = run({});
  ASSERT_EQ(clean_rc, 0) << clean;
  std::smatch digest;
  ASSERT_TRUE(std::regex_search(clean, digest, std::regex(R"(DIGEST rank=0 ([0-9a-f]{16}))"))) << clean;
  auto [rc, out] = run({"--crash-at", "23"});
  ASSERT_EQ(rc, 0) << out;
  // Not necessarily at a line's start: the thread that keeps the state on SIGTERM may write while
  // the main thread prints the traceback of Gloo's error in pieces (seen under ASan).
  EXPECT_NE(out.find("rank 0: kept the state of step 23 in memory on the way out"), std::string::npos) << out;
  EXPECT_NE(out.find("[default1]:RESTORED step=23"), std::string::npos) << out;
  EXPECT_NE(out.find("0 step(s) of work lost"), std::string::npos) << out;
  EXPECT_NE(out.find("DIGEST rank=1 " + digest[1].str()), std::string::npos) << out;
}

// The summary shows a torch 2.6 script's traceback, which c10d's excepthook prints with "[rank1]: "
// on every line, as the traceback it is (agent/stderr_error.h).
TEST(Torch2xSummaryTest, ATorchTwoSixTracebackIsReadThroughItsRankPrefix) {
  const std::string root = TrixieTorchRoot();
  if (root.empty() || ::geteuid() != 0) {
    GTEST_SKIP() << "needs root and a trixie root with python3-torch (scripts/trixie-torch-root.sh BUILD_DIR, which "
                    "CTest's Torch2xRoot.Make runs where it can)";
  }
  const std::string name = "/tmp/dtrun_raise_after_init_" + std::to_string(::getpid()) + ".py";
  std::filesystem::copy_file(Worker("raise_after_init.py"), root + name, std::filesystem::copy_options::overwrite_existing);
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--no-python", "unshare", "--mount",
                             "--propagation", "private", "sh", "-c",
                             "mount -t proc proc \"$0/proc\" && exec chroot \"$0\" python3 \"$1\"", root, name});
  std::filesystem::remove(root + name);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("[default1]:[rank1]: ValueError: bad batch 7"), std::string::npos) << out;  // as torch 2.6 prints it
  const std::string root_cause = out.substr(std::min(out.size(), out.find("Root Cause")));
  EXPECT_NE(root_cause.find("rank      : 1 (local_rank: 1)"), std::string::npos) << out;
  EXPECT_NE(root_cause.find("traceback : Traceback (most recent call last):\n  File \"" + name + "\", line 16"),
            std::string::npos)
      << out;
  EXPECT_NE(root_cause.find("\nValueError: bad batch 7"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing

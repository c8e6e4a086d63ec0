#include "tests/support/packaged_tree.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tests/support/process_harness.h"
#include "tests/support/suite_memo.h"

namespace dtrun::testing {
namespace {

absl::StatusOr<std::string> MakePackagedPrefix() {
  const std::string dir = MakeSuiteDir("packaged_tree");
  const std::string build = std::filesystem::canonical(BinDir() + "/..").string();
  auto [rc, out] = RunToEnd({"cpack", "-G", "DEB", "-B", dir + "/cpack", "--config", build + "/CPackConfig.cmake"});
  if (rc != 0) return absl::InternalError(absl::StrCat("cpack failed (", rc, "): ", out));
  int debs = 0;  // dtrun and dtrun-trainers, unpacked into one root as both installed
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/cpack")) {
    if (entry.path().extension() != ".deb") continue;
    auto [xrc, xout] = RunToEnd({"dpkg-deb", "-x", entry.path().string(), dir + "/root"});
    if (xrc != 0) return absl::InternalError(absl::StrCat("dpkg-deb -x ", entry.path().string(), ": ", xout));
    ++debs;
  }
  if (debs == 0) return absl::InternalError(absl::StrCat("cpack made no .deb: ", out));
  return dir + "/root/usr";
}

}  // namespace

absl::StatusOr<std::string> PackagedPrefix() {
  // Once per CTest run: cpack took ~13 CPU-s, in every Slurm test.
  static const absl::StatusOr<std::string> prefix = []() -> absl::StatusOr<std::string> {
    absl::Status failed;
    std::string made = OncePerSuite("packaged_tree", [&] {
      absl::StatusOr<std::string> tree = MakePackagedPrefix();
      if (!tree.ok()) failed = tree.status();
      return tree.ok() ? *tree : std::string();
    });
    if (!failed.ok()) return failed;  // a failed make is not kept, so `made` is a tree otherwise
    return made;
  }();
  return prefix;
}

std::string PathWithPackage(const std::string& prefix) {
  const char* path = std::getenv("PATH");
  return absl::StrCat(prefix, "/bin:", path ? path : "/usr/bin:/bin");
}

}  // namespace dtrun::testing

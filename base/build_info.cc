#include "base/build_info.h"

#include "absl/strings/str_cat.h"

namespace dtrun {
namespace generated {
extern const char kVersion[];
extern const char kCommit[];
extern const char kTorch[];
extern const char kCuda[];
extern const char kCompiler[];
}  // namespace generated

const BuildInfo& ThisBuild() {
  static const BuildInfo info{generated::kVersion, generated::kCommit, generated::kTorch, generated::kCuda,
                              generated::kCompiler};
  return info;
}

std::string VersionText(const char* program) {
  const BuildInfo& b = ThisBuild();
  const std::string torch = std::string(b.torch) == "none" ? "not built"
                            : std::string(b.cuda) == "none"
                                ? absl::StrCat("LibTorch ", b.torch, ", CPU only")
                                : absl::StrCat("LibTorch ", b.torch, ", CUDA ", b.cuda);
  return absl::StrCat(program, " ", b.version, " (commit ", b.commit, ")\ntrainers and worker library: ", torch,
                      "; compiler: ", b.compiler);
}

}  // namespace dtrun

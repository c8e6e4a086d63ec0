#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/executable.h"
#include "rendezvous/grpc_module.h"

namespace dtrun::rdzv {

absl::StatusOr<const GrpcModuleApi*> LoadGrpcModule() {
  static const GrpcModuleApi* loaded = nullptr;
  if (loaded) return loaded;
  constexpr char kName[] = "libdtrun_rdzv_grpc.so";
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("DTRUN_RDZV_MODULE"); env && *env) candidates.push_back(env);
  if (std::string dir = RunningExecutable(); !dir.empty()) {
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(absl::StrCat(dir, "/../lib/", kName));        // the build tree
    candidates.push_back(absl::StrCat(dir, "/../lib/dtrun/", kName));  // installed (/usr/lib/dtrun)
    candidates.push_back(absl::StrCat(dir, "/", kName));
  }
  std::vector<std::string> errors;
  for (const std::string& path : candidates) {
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      errors.push_back(::dlerror());
      continue;
    }
    auto entry = reinterpret_cast<const GrpcModuleApi* (*)()>(::dlsym(handle, "dtrun_rdzv_grpc_module_v1"));
    if (!entry) {
      errors.push_back(absl::StrCat(path, ": no entry point"));
      continue;
    }
    loaded = entry();
    return loaded;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "multi-node jobs need ", kName, " (installed next to dtrun); tried: ", absl::StrJoin(errors, "; ")));
}

}  // namespace dtrun::rdzv

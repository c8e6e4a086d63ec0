#include "worker/blas_check.h"

#include <dlfcn.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrun::worker {

bool IsReferenceBlas(std::string_view path, const std::function<bool(const char*)>& exports) {
  const std::string name = std::filesystem::path(std::string(path)).filename().string();
  if (!absl::StartsWith(name, "libblas.so")) return false;
  for (const char* identity :
       {"openblas_get_config", "bli_info_get_version_str", "mkl_get_version", "flexiblas_avail", "ATL_buildinfo"}) {
    if (exports(identity)) return false;
  }
  return true;
}

std::string SlowBlasWarning() {
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sgemm == nullptr || dladdr(sgemm, &info) == 0 || info.dli_fname == nullptr) return "";
  void* library = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return "";
  const bool reference =
      IsReferenceBlas(info.dli_fname, [&](const char* symbol) { return dlsym(library, symbol) != nullptr; });
  dlclose(library);
  if (!reference) return "";
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(info.dli_fname, ec);
  return absl::StrCat("warning: matrix products run on the reference BLAS (", ec ? info.dli_fname : real.string(),
                      "), about 3x slower for this model; install an optimised one (Debian: apt install "
                      "libopenblas0-openmp) and start again");
}

}  // namespace dtrun::worker

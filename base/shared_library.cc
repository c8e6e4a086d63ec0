#include "base/shared_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dtrun {

absl::StatusOr<SharedLibrary> SharedLibrary::Open(const std::vector<std::string>& names, const std::string& package) {
  std::vector<std::string> errors;
  for (const std::string& name : names) {
    if (void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return SharedLibrary(handle);
    const char* why = ::dlerror();
    errors.push_back(why ? why : name);
  }
  return absl::NotFoundError(absl::StrCat("cannot load ", absl::StrJoin(names, " or "), " (install ", package,
                                          "): ", absl::StrJoin(errors, "; ")));
}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_) ::dlclose(handle_);
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

SharedLibrary::~SharedLibrary() {
  if (handle_) ::dlclose(handle_);
}

void* SharedLibrary::FindSymbol(const char* symbol) const { return handle_ ? ::dlsym(handle_, symbol) : nullptr; }

}  // namespace dtrun

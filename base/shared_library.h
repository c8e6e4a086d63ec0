// A system library opened at run time (dlopen) instead of linked, for what only some runs need
// and some machines lack: NVML (GPU numbers in `dtrun status`) and libmicrohttpd (the metrics
// endpoint). dtrun starts without them and says which package to install when one is asked for.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun {

class SharedLibrary {
 public:
  // Opens the first of `names` that loads (RTLD_NOW | RTLD_LOCAL). NotFound lists what was tried
  // and names `package`, the Debian package that provides it.
  static absl::StatusOr<SharedLibrary> Open(const std::vector<std::string>& names, const std::string& package);
  SharedLibrary(SharedLibrary&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  SharedLibrary& operator=(SharedLibrary&& other) noexcept;
  ~SharedLibrary();

  // The symbol as `Fn` (a function pointer type); nullptr when the library lacks it.
  template <typename Fn>
  Fn Find(const char* symbol) const {
    return reinterpret_cast<Fn>(FindSymbol(symbol));
  }

 private:
  explicit SharedLibrary(void* handle) : handle_(handle) {}
  void* FindSymbol(const char* symbol) const;
  void* handle_ = nullptr;
};

}  // namespace dtrun

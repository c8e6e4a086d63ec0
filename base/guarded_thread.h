// A thread's whole body, run so that an exception escaping it (std::bad_alloc under memory
// pressure, a library that throws) cannot end the process with std::terminate — which would take
// every worker down with no summary. The exception becomes an Internal status for `on_error`,
// which turns it into a clean shutdown of what the thread served (and must not throw).
#pragma once

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dtrun {

template <typename Body, typename OnError>
void RunGuarded(const char* what, Body&& body, OnError&& on_error) noexcept {
  try {
    std::forward<Body>(body)();
  } catch (const std::exception& e) {
    on_error(absl::InternalError(absl::StrCat(what, " stopped: ", e.what())));
  } catch (...) {
    on_error(absl::InternalError(absl::StrCat(what, " stopped: an unknown exception")));
  }
}

}  // namespace dtrun

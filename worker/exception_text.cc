#include "worker/exception_text.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"
#include "worker/error_record.h"

namespace dtrun::worker {
namespace {

std::string TypeName(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(mangled);
}

std::string Cut(std::string text, size_t max) {
  if (text.size() > max) text.resize(max);
  return text;
}

}  // namespace

ExceptionText DescribeException(const std::exception& e) {
  const std::string type = TypeName(e);
  std::string what = e.what() == nullptr ? "" : e.what();
  std::string stack;
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    stack = std::move(what);
    what = c10_error->what_without_backtrace();
  }
  // std::bad_alloc says its own type name: once is enough.
  std::string message = what.empty() || what == type ? type : absl::StrCat(type, ": ", what);
  return {Cut(std::move(message), kMaxMessageBytes),
          Cut(stack.empty() ? std::string() : absl::StrCat(type, ": ", stack), kMaxCallstackBytes)};
}

void ReportException(absl::string_view program, const std::exception& e) {
  try {
    ExceptionText text = DescribeException(e);
    ReportFatalError(program, text.message, text.callstack);
  } catch (const std::exception&) {  // no memory left to describe it: the bare what()
    ReportFatalError(program, e.what() == nullptr ? "" : e.what());
  }
}

}  // namespace dtrun::worker

// Sizes as people read them in dtrun's lines: decimal megabytes with one decimal ("89.5 MB"), and
// kilobytes below a tenth of a megabyte ("48 kB"), which would otherwise read as nothing.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtrun {

inline std::string FormatBytes(uint64_t bytes) {
  if (bytes < 100000) return absl::StrCat((bytes + 999) / 1000, " kB");
  return absl::StrCat(bytes / 100000 / 10.0, " MB");
}

}  // namespace dtrun

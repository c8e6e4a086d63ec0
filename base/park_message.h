// Warm workers (docs/DESIGN.md, "Warm workers"): what the agent sends a parked worker to release
// it into a round, over the pipe named by DTRUN_PARK_FD. The message is the round's whole
// environment: "<bytes>\n" in decimal, then that many bytes of NAME=value entries, each ended by
// a NUL. Both sides are ours, but the reader still bounds what it accepts.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

inline constexpr size_t kMaxReleaseBytes = 1 << 20;
inline constexpr size_t kMaxReleaseHeaderBytes = 16;  // "<bytes>\n"

std::string EncodeRelease(const std::vector<std::string>& env);

// The payload's size from the header line (without its newline). InvalidArgument if it is not a
// decimal count up to kMaxReleaseBytes.
absl::StatusOr<size_t> DecodeReleaseSize(absl::string_view header);
// The entries of a payload. InvalidArgument names the first entry that is not NAME=value with a
// non-empty name, or a payload that does not end with a NUL.
absl::StatusOr<std::vector<std::string>> DecodeReleaseEnv(absl::string_view payload);

}  // namespace dtrun

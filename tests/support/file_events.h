// Test support: waits on files written into directories (inotify), instead of polling them.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace dtrun::testing {

// Calls `done` now and after each file renamed into, or written and closed in, one of `dirs` (which
// must exist), until it returns true or `timeout` passes; returns its last answer.
bool AwaitFiles(const std::vector<std::string>& dirs, const std::function<bool()>& done,
                std::chrono::milliseconds timeout);

}  // namespace dtrun::testing

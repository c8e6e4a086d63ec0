// Test support: asking about a state the test cannot subscribe to (another process's status, a
// daemon's view of its nodes, an HTTP endpoint), with a rest between questions.
#pragma once

#include <chrono>
#include <functional>

namespace dtrun::testing {

// Calls `ask` until it returns true (then true) or `timeout` has passed (then false), resting
// `pause` between calls. Asked back to back, each question (often a process: `dtrun status`,
// `sinfo`) took a core from the job under test and from the test beside it.
bool PollUntil(const std::function<bool()>& ask, std::chrono::milliseconds timeout,
               std::chrono::milliseconds pause = std::chrono::milliseconds(100));

}  // namespace dtrun::testing

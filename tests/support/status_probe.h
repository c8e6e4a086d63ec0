// Test support: asks `dtrun status --json` until every rank's step has moved on (bounded), for the
// tests of the live view on one host and across hosts.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace dtrun::testing {

// One document per line of `dtrun status --json` output.
std::vector<nlohmann::json> ParseJsonLines(const std::string& out);
// Global rank → last step (-1: none yet), over every node of one status document.
std::map<int, int64_t> StepsByRank(const nlohmann::json& job);
// Calls `ask` (one status query) until its single job satisfies `done`; returns the last answer
// (checked by the caller) at the latest at `timeout`.
nlohmann::json AwaitStatus(const std::function<std::vector<nlohmann::json>()>& ask,
                           const std::function<bool(const nlohmann::json&)>& done,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));
// Calls `ask` (one status query) until its single job shows `ranks` ranks, each with a step past
// its step in `after`; returns the last answer (checked by the caller) at the latest at `timeout`.
nlohmann::json AwaitStepsPast(const std::function<std::vector<nlohmann::json>()>& ask,
                              const std::map<int, int64_t>& after, size_t ranks,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace dtrun::testing

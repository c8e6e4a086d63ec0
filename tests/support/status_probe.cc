#include "tests/support/status_probe.h"

#include <sstream>

#include "tests/support/poll.h"

namespace dtrun::testing {

std::vector<nlohmann::json> ParseJsonLines(const std::string& out) {
  std::vector<nlohmann::json> docs;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) docs.push_back(nlohmann::json::parse(line, nullptr, false));
  return docs;
}

std::map<int, int64_t> StepsByRank(const nlohmann::json& job) {
  std::map<int, int64_t> steps;
  if (!job.is_object() || !job.contains("nodes")) return steps;
  for (const auto& node : job["nodes"]) {
    for (const auto& r : node["ranks"]) {
      if (r["rank"].is_number_integer()) {
        steps[r["rank"].get<int>()] = r["step"].is_number_integer() ? r["step"].get<int64_t>() : -1;
      }
    }
  }
  return steps;
}

nlohmann::json AwaitStatus(const std::function<std::vector<nlohmann::json>()>& ask,
                           const std::function<bool(const nlohmann::json&)>& done, std::chrono::milliseconds timeout) {
  nlohmann::json last;
  PollUntil(
      [&] {
        std::vector<nlohmann::json> jobs = ask();
        if (jobs.size() != 1 || !jobs[0].is_object()) return false;  // not up yet: a line that is no JSON
        last = std::move(jobs[0]);
        return done(last);
      },
      timeout);
  return last;
}

nlohmann::json AwaitStepsPast(const std::function<std::vector<nlohmann::json>()>& ask,
                              const std::map<int, int64_t>& after, size_t ranks, std::chrono::milliseconds timeout) {
  return AwaitStatus(
      ask,
      [&](const nlohmann::json& job) {
        std::map<int, int64_t> now = StepsByRank(job);
        bool past = now.size() == ranks;
        for (const auto& [rank, step] : now) {
          auto before = after.find(rank);
          past = past && step >= 0 && (before == after.end() || step > before->second);
        }
        return past;
      },
      timeout);
}

}  // namespace dtrun::testing

#include "rendezvous/rendezvous_options.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace dtrun::rdzv {

namespace {

// Seconds as torchrun takes them (fractions allowed), finite and within [min, 30 days].
absl::StatusOr<Duration> ParseSeconds(const std::string& key, const std::string& value, double min) {
  constexpr double kMaxSeconds = 30 * 86400.0;
  double seconds = 0;
  if (!absl::SimpleAtod(value, &seconds) || !std::isfinite(seconds) || seconds < min || seconds > kMaxSeconds) {
    return absl::InvalidArgumentError(absl::StrCat("--rdzv-conf ", key, "=", value, ": expected seconds from ", min,
                                                   " to ", kMaxSeconds));
  }
  return Duration(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

absl::Status ApplyRdzvConf(const std::map<std::string, std::string>& conf, RendezvousOptions& o,
                           std::vector<std::string>* ignored) {
  const std::map<std::string, Duration*> durations = {
      {"join_timeout", &o.join_timeout},         {"last_call_timeout", &o.last_call_timeout},
      {"close_timeout", &o.close_timeout},       {"keep_alive_interval", &o.keep_alive_interval},
      {"heartbeat_timeout", &o.heartbeat_timeout}, {"read_timeout", &o.read_timeout},
      {"exit_barrier_timeout", &o.exit_barrier_timeout},
  };
  for (const auto& [key, value] : conf) {
    if (key == "is_host" || key == "timeout") continue;  // used by the launcher / torchrun alias
    if (key == "keep_alive_max_attempt") {
      if (!absl::SimpleAtoi(value, &o.keep_alive_max_attempt) || o.keep_alive_max_attempt < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rdzv-conf keep_alive_max_attempt=", value, ": expected an integer >= 1"));
      }
      continue;
    }
    auto it = durations.find(key);
    if (it == durations.end()) {
      if (ignored) ignored->push_back(key);
      continue;
    }
    DT_ASSIGN_OR_RETURN(*it->second, ParseSeconds(key, value, key == "keep_alive_interval" ? 0.01 : 0));
  }
  if (conf.count("timeout") && !conf.count("join_timeout")) {
    DT_ASSIGN_OR_RETURN(o.join_timeout, ParseSeconds("timeout", conf.at("timeout"), 0));
  }
  return absl::OkStatus();
}

}  // namespace dtrun::rdzv

#include "agent/event_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <chrono>

#include "base/unix_time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {

EventLog::EventLog(const std::vector<std::string>& paths, std::string run_id, std::string host)
    : run_id_(std::move(run_id)), host_(std::move(host)) {
  for (const std::string& path : paths) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd.valid()) {
      spdlog::warn("cannot write the event log {}: {}; continuing without it", path, strerror(errno));
      continue;
    }
    files_.push_back(std::move(fd));
  }
}

void EventLog::Record(const char* event, int64_t round, const nlohmann::json& fields) {
  if (files_.empty()) return;
  nlohmann::json line = {
      {"ts_ms", UnixMillisNow()},
      {"event", event},
      {"run_id", run_id_},
      {"host", host_},
      {"pid", ::getpid()},
      {"round", round},
  };
  for (const auto& [key, value] : fields.items()) line[key] = value;
  // Invalid UTF-8 from a worker (an error message) is replaced, never a throw.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  for (const UniqueFd& fd : files_) WriteAll(fd.get(), text.data(), text.size());  // O_APPEND: one write per line
}

}  // namespace dtrun

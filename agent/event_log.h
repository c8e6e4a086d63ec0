// The agent's event log: what happened to the job on this node, one JSON object per line, for
// people and scripts that reconstruct a run afterwards (schema: docs/DESIGN.md, "Event log").
// Written to OUTPUT/events.jsonl under --log-dir and to --event-log FILE. Every record carries
// ts_ms (Unix time in ms), event, run_id, host, pid (dtrun's) and round. Not thread-safe: the
// agent's loop writes it.
#pragma once

#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "nlohmann/json_fwd.hpp"

namespace dtrun {

class EventLog {
 public:
  EventLog() = default;
  // Appends to every path (created 0644 if missing, never through a symlink); a path that cannot
  // be opened is reported once on the console and left out.
  EventLog(const std::vector<std::string>& paths, std::string run_id, std::string host);

  bool enabled() const { return !files_.empty(); }
  // One line: the common fields, then `fields` (an object).
  void Record(const char* event, int64_t round, const nlohmann::json& fields);

 private:
  std::vector<UniqueFd> files_;
  std::string run_id_;
  std::string host_;
};

}  // namespace dtrun

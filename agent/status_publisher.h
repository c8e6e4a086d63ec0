// The live status as an agent component (docs/DESIGN.md, "dtrun status"): once a status interval it
// asks the agent to describe its node and hands the rows to every reader — the snapshot file that
// `dtrun status` reads, the rendezvous service (multi-node), the metrics endpoint and the progress
// line on a terminal.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "agent/agent_component.h"
#include "agent/agent_options.h"
#include "agent/event_log.h"
#include "base/console_writer.h"
#include "rendezvous/round_source.h"
#include "status/metrics_server.h"
#include "status/node_status.h"
#include "status/prometheus.h"

namespace dtrun {

class StatusPublisher : public AgentComponent {
 public:
  // What the agent knows when it is asked: its node's rows, and the job's phase as last seen.
  struct Snapshot {
    status::NodeStatus node;
    std::string phase;  // "forming", "running", ...
  };
  using Describe = std::function<Snapshot(Clock::time_point now)>;

  StatusPublisher(const AgentOptions& options, ConsoleWriter& out, EventLog& events, rdzv::RoundSource& rounds,
                  const status::AgentCounters& counters, Describe describe);
  // Starts the metrics endpoint (--metrics-port); the first rows go out at the next wake-up.
  void Start();
  // Ends the progress line on the terminal.
  void Stop();

  std::optional<Clock::time_point> NextDeadline() const override { return next_at_; }
  void OnWake(Clock::time_point now) override;

  // "[dtrun] step 120/1000 | 4.10 steps/s | 131.2 samples/s | ETA 3m34s": what a terminal shows below
  // the workers' lines while they report steps; "" (no line) before the first report and while the
  // workers stop.
  static std::string ProgressLine(const status::NodeStatus& node);

  // One line for the job's end on the rank named as a straggler during the run, the costliest if
  // several ("" if none).
  std::string Summary() const;

 private:
  void Publish(Clock::time_point now);
  // Logs and records a change of the named straggler (docs/DESIGN.md, "Stragglers").
  void NoteStraggler(const std::optional<status::StragglerStatus>& now_named, int64_t round, int64_t step);

  const AgentOptions& options_;
  ConsoleWriter& out_;
  EventLog& events_;
  rdzv::RoundSource& rounds_;
  const status::AgentCounters& counters_;
  Describe describe_;
  Clock::time_point next_at_;
  std::unique_ptr<status::MetricsServer> metrics_;
  bool write_warned_ = false;
  std::string named_;  // the straggler named now, "rank@node" ("": none)
  int named_count_ = 0;
  std::optional<status::StragglerStatus> worst_;
};

}  // namespace dtrun

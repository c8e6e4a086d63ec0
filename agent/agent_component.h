// The one interface through which a concern of the node agent (worker output, FileTimers, in-memory
// snapshots, the live status, ...) joins the agent's loop, as Envoy's dispatcher serves its
// listeners: a component watches its own fds on the EventLoop it is given, says when it next has
// work due without an fd event, and hears of each round's start and end. The Agent runs rounds;
// everything else is a component. All calls come from the loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "agent/worker_group.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun {

class AgentComponent {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~AgentComponent() = default;

  // The earliest time this component has work due that no fd will signal (none: nothing).
  virtual std::optional<Clock::time_point> NextDeadline() const { return std::nullopt; }
  // After every wake-up of the loop, once the ready fds' handlers ran: do what is due by `now`.
  virtual void OnWake(Clock::time_point /*now*/) {}
  // `group`'s workers were started for `round` / have all exited. `group` outlives the calls between.
  virtual void OnRoundStarted(WorkerGroup& /*group*/, const rdzv::Assignment& /*round*/) {}
  virtual void OnGroupExited(WorkerGroup& /*group*/) {}
};

// The agent's components in the order they are called (registration order).
class AgentComponents {
 public:
  void Add(AgentComponent& c) { all_.push_back(&c); }
  std::optional<AgentComponent::Clock::time_point> NextDeadline() const {
    std::optional<AgentComponent::Clock::time_point> next;
    for (const AgentComponent* c : all_) {
      std::optional<AgentComponent::Clock::time_point> t = c->NextDeadline();
      if (t && (!next || *t < *next)) next = t;
    }
    return next;
  }
  void OnWake(AgentComponent::Clock::time_point now) {
    for (AgentComponent* c : all_) c->OnWake(now);
  }
  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) {
    for (AgentComponent* c : all_) c->OnRoundStarted(group, round);
  }
  void OnGroupExited(WorkerGroup& group) {
    for (AgentComponent* c : all_) c->OnGroupExited(group);
  }

 private:
  std::vector<AgentComponent*> all_;
};

}  // namespace dtrun

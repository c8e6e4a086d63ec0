// The node agent: hosts the workers' TCPStore, runs the worker group, relays its output, restarts
// it on failure up to --max-restarts, and forwards signals. Event-driven: one epoll loop over a
// signalfd (SIGCHLD and the handled signals) and the workers' pipes; no polling interval.
//
// Worker-group states per attempt (torchelastic's names):
//   HEALTHY --worker exits non-zero--> UNHEALTHY --all stopped--> restart (HEALTHY) or FAILED
//   HEALTHY --all exit 0--> SUCCEEDED
//   any     --handled signal--> STOPPED (signal forwarded, grace, SIGKILL)
#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/agent_options.h"
#include "agent/worker_group.h"
#include "base/unique_fd.h"

namespace dtrun {

class TcpStoreServer;

class Agent {
 public:
  // `paths` must exist or be creatable. The caller blocks SIGCHLD and `signals_to_handle` in
  // every thread before constructing the agent (see BlockAgentSignals).
  Agent(AgentOptions options, AttemptPaths paths, std::map<std::string, std::string> base_env);
  ~Agent();

  // Runs the job to the end. Returns dtrun's exit code: 0 on success, the root-cause worker's
  // code (128 + signal if it was killed) on failure, 128 + signal if dtrun was interrupted, 1 if
  // the job could not start (the reason is logged).
  int Run();

 private:
  enum class Outcome { kSucceeded, kFailed, kInterrupted };
  Outcome RunAttempt(WorkerGroup& group);
  void OnSignal(int signo, WorkerGroup& group);
  void ReapChildren(WorkerGroup& group);
  void KillStrays();
  void WatchOutputs(WorkerGroup& group);
  int Finish(Outcome outcome, const WorkerGroup& group);

  AgentOptions options_;
  AttemptPaths paths_;
  std::map<std::string, std::string> base_env_;
  std::unique_ptr<TcpStoreServer> store_;
  UniqueFd signal_fd_;
  UniqueFd epoll_fd_;

  // Per-attempt stop state.
  bool stopping_ = false;
  int stop_signal_ = 0;        // the handled signal that interrupted us (0: stopping for failure)
  int signals_received_ = 0;   // a second interrupt escalates to SIGKILL at once
  bool killed_ = false;
  std::chrono::steady_clock::time_point kill_deadline_;
};

// Blocks SIGCHLD and `signals` in the calling thread (threads created later inherit the mask).
void BlockAgentSignals(const std::vector<int>& signals);

}  // namespace dtrun

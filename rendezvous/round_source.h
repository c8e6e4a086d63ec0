// How an agent learns its rounds: the job-wide view of the rendezvous, delivered as events on an
// fd that the agent's epoll loop watches. Single-node jobs use LocalRoundSource (in-process state
// machine); multi-node jobs use GrpcRoundSource (the rendezvous service).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "rendezvous/rendezvous_state.h"
#include "status/node_status.h"

namespace dtrun::rdzv {

class RoundSource {
 public:
  virtual ~RoundSource() = default;
  // Becomes readable when Latest() may have news.
  virtual int event_fd() const = 0;
  // Drains the fd and returns the newest view (nullopt: none yet). An error ends the agent: the
  // service rejected the node or cannot be reached any more (the message names it).
  virtual absl::StatusOr<std::optional<NodeView>> Latest() = 0;
  virtual void ReportSuccess(int64_t round) = 0;
  virtual void ReportFailure(int64_t round, const std::vector<FailureInfo>& failures) = 0;
  // The agent is going away.
  virtual void Leave() = 0;
  // How long a node whose workers succeeded waits for the others before exiting anyway.
  virtual std::chrono::milliseconds exit_barrier_timeout() const = 0;
  // This node's latest status rows, for `dtrun status` on other nodes (multi-node only). Returns
  // at once; the source sends them when it can.
  virtual void PublishStatus(status::NodeStatus node) {}
  // The rank the job judged to hold everyone back, as last learnt (docs/DESIGN.md, "Stragglers").
  virtual std::optional<status::StragglerStatus> Straggler() { return std::nullopt; }
};

// One node, no network: the same state machine (and restart budget) in-process.
class LocalRoundSource : public RoundSource {
 public:
  // `store_addr`/`store_port`: the agent's TCPStore, which the workers are told about.
  LocalRoundSource(int max_restarts, int nproc, const std::string& store_addr, int store_port);
  ~LocalRoundSource() override;
  int event_fd() const override { return event_fd_; }
  absl::StatusOr<std::optional<NodeView>> Latest() override;
  void ReportSuccess(int64_t round) override;
  void ReportFailure(int64_t round, const std::vector<FailureInfo>& failures) override;
  void Leave() override {}
  std::chrono::milliseconds exit_barrier_timeout() const override { return std::chrono::milliseconds(0); }
  // Kept by the in-process state, which judges stragglers from it as the service does.
  void PublishStatus(status::NodeStatus node) override;
  std::optional<status::StragglerStatus> Straggler() override;

 private:
  void Post();
  RendezvousState state_;
  std::string node_id_;
  int event_fd_;
};

}  // namespace dtrun::rdzv

// Client side of the rendezvous service: typed calls with deadlines, and GrpcRoundSource, which
// turns the service into the agent's event stream (a Watch long-poll thread and a keep-alive
// thread; both post to one eventfd).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "rendezvous/lease_rules.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/round_source.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace dtrun::rdzv {

struct JoinResult {
  std::string node_id;
  std::chrono::milliseconds keep_alive_interval{5000};
  int keep_alive_max_attempt = 3;
  std::chrono::milliseconds exit_barrier_timeout{300000};
};

class RendezvousClient {
 public:
  static absl::StatusOr<std::unique_ptr<RendezvousClient>> Create(const ClientOptions& options);
  ~RendezvousClient();

  // Retries while the service is unreachable (it may start after this node), and while its static
  // rank is held by a silent node at another address (RendezvousState::Join), until `deadline`.
  absl::StatusOr<JoinResult> Join(const NodeInfo& node, std::chrono::steady_clock::time_point deadline);
  // Returns the view once its version is newer than `after`; DeadlineExceeded after `max_wait`.
  absl::StatusOr<NodeView> Watch(const std::string& node_id, uint64_t after, std::chrono::milliseconds max_wait);
  // Renews the lease; `progress`, when given, becomes the node's status summary on the service.
  // `straggler`, when given, is set to the rank the service names (nullopt: none).
  absl::Status KeepAlive(const std::string& node_id, std::chrono::milliseconds timeout,
                         const status::NodeStatus* progress = nullptr,
                         std::optional<status::StragglerStatus>* straggler = nullptr);
  // A bare keep-alive over a connection of its own, made for it: it connects now, where a call on
  // the shared channel fails at once while gRPC backs off between connects.
  absl::Status KeepAliveOnANewConnection(const std::string& node_id, std::chrono::milliseconds timeout);
  absl::Status ReportOutcome(const std::string& node_id, int64_t round, bool success,
                             const std::vector<FailureInfo>& failures);
  absl::Status Leave(const std::string& node_id);
  absl::StatusOr<JobSummary> Status();
  absl::Status Kill(const std::string& reason);
  const std::string& endpoint() const { return options_.endpoint; }
  // Cancels calls in flight and makes later calls fail at once (used on shutdown).
  void CancelAll();

 private:
  class Call;
  struct Stub;
  RendezvousClient(ClientOptions options, std::unique_ptr<Stub> stub);
  // Join's wait for the service: one line on the first failed connect (and when the reason
  // changes), then wait for gRPC's reconnect; false at the deadline.
  void SayWhyNotConnected(const std::string& reason) const;
  // Waits kClaimRetryDelay (or until CancelAll, or `deadline`); false at the deadline.
  bool AwaitClaimRetry(std::chrono::steady_clock::time_point deadline);
  bool AwaitReconnect(std::chrono::steady_clock::time_point deadline);
  // One unary call with credentials, deadline and shutdown cancellation (defined in the .cc), on
  // the shared channel's stub or on `on`.
  template <typename StubT, typename Req, typename Resp>
  absl::Status Invoke(grpc::Status (StubT::*method)(grpc::ClientContext*, const Req&, Resp*), Req& req, Resp* resp,
                      std::chrono::milliseconds timeout, StubT* on = nullptr);
  ClientOptions options_;
  std::unique_ptr<Stub> stub_;
  absl::Mutex mu_;
  std::vector<void*> in_flight_ ABSL_GUARDED_BY(mu_);  // grpc::ClientContext*
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class GrpcRoundSource : public RoundSource {
 public:
  // Starts joining in the background (waiting up to `join_deadline` for the service), then
  // watches and keeps alive. Join errors (wrong token, duplicate rank, no service) arrive as the
  // error of Latest(), so the agent can still handle signals while it waits.
  static std::unique_ptr<GrpcRoundSource> Start(
      std::unique_ptr<RendezvousClient> client, const NodeInfo& node,
      std::chrono::steady_clock::time_point join_deadline);
  ~GrpcRoundSource() override;

  int event_fd() const override { return event_fd_; }
  absl::StatusOr<std::optional<NodeView>> Latest() override;
  // Reports return at once: a thread of their own delivers them, retrying with backoff until the
  // service answers (reports are idempotent per round: a repeat is Aborted, which ends it too).
  void ReportSuccess(int64_t round) override;
  void ReportFailure(int64_t round, const std::vector<FailureInfo>& failures) override;
  void Leave() override;
  std::chrono::milliseconds exit_barrier_timeout() const override { return join_.exit_barrier_timeout; }
  // Sent with the next keep-alive, at most every kStatusPushInterval (a newer one replaces it).
  // A rank's waits not yet sent are carried over into the newer summary (the straggler watch needs
  // every step it can get), the newest status::kMaxWaitsPerRank kept.
  void PublishStatus(status::NodeStatus node) override;
  std::optional<status::StragglerStatus> Straggler() override;
  static constexpr std::chrono::milliseconds kStatusPushInterval{2000};

 private:
  struct Report {
    int64_t round;
    bool success;
    std::vector<FailureInfo> failures;
  };
  GrpcRoundSource(std::unique_ptr<RendezvousClient> client, NodeInfo node);
  void JoinThenWatch(std::chrono::steady_clock::time_point join_deadline);
  void WatchLoop();
  void KeepAliveLoop();
  void Post();
  void Fatal(const absl::Status& status);
  void Rejoin();
  // The watch of `id` was answered NotFound: has the keep-alive loop ask now, and waits until it
  // has been answered (or an interval, or stopping).
  void AwaitRejoin(const std::string& id);
  void Queue(Report report);
  void ReportLoop();
  // Sends `report` until delivered, superseded by a newer one, or stopping. False if fatal.
  bool Deliver(const Report& report);
  std::string NodeId();
  bool JoinSettled() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return joined_ || stopping_ || !fatal_.ok(); }
  // What ends the keep-alive loop's wait before the next keep-alive is due (with a status
  // waiting, the due time already counts it).
  bool KeepAliveWake() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || forgotten_; }
  bool KeepAliveWakeOrStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return KeepAliveWake() || status_.has_value();
  }
  bool StoppingOrRemembered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !forgotten_; }
  // Waits until `lease` says a keep-alive is due (or stopping: false); takes the status to send
  // with it.
  bool AwaitKeepAliveDue(const LeaseRules& lease, std::string& node_id, std::optional<status::NodeStatus>& status);

  std::unique_ptr<RendezvousClient> client_;
  const NodeInfo node_;
  JoinResult join_;  // written once by the joining thread before `joined_`
  int event_fd_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
  bool left_ ABSL_GUARDED_BY(mu_) = false;  // Leave() was called: this node never joins again
  std::string node_id_ ABSL_GUARDED_BY(mu_);
  std::optional<NodeView> latest_ ABSL_GUARDED_BY(mu_);
  int last_group_rank_ ABSL_GUARDED_BY(mu_) = -1;  // in the newest round this node ran; -1: none (a spare)
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  std::optional<Report> report_ ABSL_GUARDED_BY(mu_);  // the newest undelivered report
  uint64_t reports_queued_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<status::NodeStatus> status_ ABSL_GUARDED_BY(mu_);  // not yet pushed
  std::optional<status::StragglerStatus> straggler_ ABSL_GUARDED_BY(mu_);  // from the last keep-alive
  // The watch was answered NotFound for the current node id: the service declared this node lost,
  // or was started again. The keep-alive loop asks at once (and joins again on the same answer)
  // instead of at its next keep-alive, up to an interval later; its answer clears this.
  bool forgotten_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
  std::thread keeper_;
  std::thread reporter_;
};

}  // namespace dtrun::rdzv

#include "rendezvous/rendezvous_client.h"

#include <grpcpp/grpcpp.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/guarded_thread.h"
#include "base/status_macros.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/tls_check.h"
#include "rendezvous/wire.h"
#include "rendezvous/workers_store.h"
#include "spdlog/spdlog.h"

namespace dtrun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kCallTimeout = std::chrono::seconds(10);

// What a failed connect most likely means, beyond gRPC's words; empty when the service is simply
// not listening (yet).
std::string ConnectHint(const std::string& reason, bool tls) {
  for (const char* not_listening : {"onnection refused", "DNS", "No route", "unreachable"}) {
    if (absl::StrContains(reason, not_listening)) return "";
  }
  if (tls) {
    return "the service may be plaintext (give it the same --rdzv-tls-* flags), or not trust this node's "
           "certificate, or its certificate may not name the host of this endpoint (subjectAltName)";
  }
  return "if the service uses TLS, give this side --rdzv-tls-cert, --rdzv-tls-key and --rdzv-tls-ca too";
}

// One-shot calls (`dtrun kill/status --endpoint`) fail with the hint attached.
absl::Status WithConnectHint(absl::Status st, bool tls) {
  if (st.code() != absl::StatusCode::kUnavailable && st.code() != absl::StatusCode::kUnknown) return st;
  std::string hint = ConnectHint(std::string(st.message()), tls);
  if (hint.empty()) return st;
  return absl::Status(st.code(), absl::StrCat(st.message(), "; ", hint));
}

void SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) {
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace

// Registers a context for CancelAll while a call is in flight.
class RendezvousClient::Call {
 public:
  explicit Call(RendezvousClient* c) : client_(c) {
    absl::MutexLock lock(&c->mu_);
    cancelled = c->cancelled_;
    c->in_flight_.push_back(&ctx);
  }
  ~Call() {
    absl::MutexLock lock(&client_->mu_);
    auto& v = client_->in_flight_;
    v.erase(std::remove(v.begin(), v.end(), static_cast<void*>(&ctx)), v.end());
  }
  grpc::ClientContext ctx;
  bool cancelled = false;  // CancelAll ran before this call: do not start it

 private:
  RendezvousClient* client_;
};

const absl::Status kShutDown = absl::CancelledError("the rendezvous client is shutting down");

void RendezvousClient::CancelAll() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (void* c : in_flight_) static_cast<grpc::ClientContext*>(c)->TryCancel();
}

struct RendezvousClient::Stub {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Rendezvous::Stub> stub;
  v1::Credentials auth;
  std::shared_ptr<grpc::ChannelCredentials> creds;  // for a connection of its own
  grpc::ChannelArguments args;
};

absl::StatusOr<std::unique_ptr<RendezvousClient>> RendezvousClient::Create(const ClientOptions& options) {
  RouteGrpcLogs();
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (options.tls.enabled()) {
    DT_RETURN_IF_ERROR(CheckTlsCredentials(options.tls));
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls.ca_pem;
    ssl.pem_cert_chain = options.tls.cert_pem;
    ssl.pem_private_key = options.tls.key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Reconnect quickly after the service comes up or back; the defaults back off to minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // `dtrun status` of a large job: about 100 bytes per worker (gRPC's default limit is 4 MiB).
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = std::make_unique<Stub>();
  stub->channel = grpc::CreateCustomChannel(options.endpoint, creds, args);
  stub->creds = creds;
  stub->args = args;
  stub->stub = v1::Rendezvous::NewStub(stub->channel);
  stub->auth.set_run_id(options.run_id);
  stub->auth.set_token(options.token);
  stub->auth.set_protocol_version(kProtocolVersion);
  return std::unique_ptr<RendezvousClient>(new RendezvousClient(options, std::move(stub)));
}

RendezvousClient::RendezvousClient(ClientOptions options, std::unique_ptr<Stub> stub)
    : options_(std::move(options)), stub_(std::move(stub)) {}
RendezvousClient::~RendezvousClient() = default;

absl::StatusOr<JoinResult> RendezvousClient::Join(const NodeInfo& node, Clock::time_point deadline) {
  v1::JoinRequest req;
  *req.mutable_auth() = stub_->auth;
  req.set_host(node.host);
  req.set_nproc(node.nproc);
  req.set_store_addr(node.store_addr);
  req.set_store_port(node.store_port);
  req.set_node_rank(node.requested_rank);
  req.set_predecessor_dead(node.predecessor_dead);
  req.set_rounds_seen(node.rounds_seen);
  req.set_restarts_used(node.restarts_used);
  req.set_replica_addr(node.replica_addr);
  req.set_replica_port(node.replica_port);
  req.set_failure_domain(node.failure_domain);
  if (node.last_group_rank >= 0) req.set_last_group_rank(node.last_group_rank);
  std::string last_reason;
  bool claiming = false;
  for (;;) {
    v1::JoinResponse resp;
    grpc::Status st;
    {
      Call call(this);
      if (call.cancelled) return kShutDown;
      // Not wait_for_ready: a failed connect fails the call at once with gRPC's reason, so a
      // TLS mistake is named at the first attempt instead of after the whole join timeout.
      call.ctx.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      st = stub_->stub->Join(&call.ctx, req, &resp);
    }
    if (st.ok()) {
      JoinResult r;
      r.node_id = resp.node_id();
      r.keep_alive_interval = std::chrono::milliseconds(resp.keep_alive_interval_ms());
      r.keep_alive_max_attempt = resp.keep_alive_max_attempt();
      r.exit_barrier_timeout = std::chrono::milliseconds(resp.exit_barrier_timeout_ms());
      return r;
    }
    if (st.error_code() == grpc::StatusCode::ABORTED) {
      if (!std::exchange(claiming, true)) spdlog::warn("{}", st.error_message());
      if (AwaitClaimRetry(deadline)) continue;
      return absl::DeadlineExceededError(absl::StrCat(st.error_message(), "; still so when the join timeout ran out"));
    }
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return FromGrpc(st);
    }
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message() != last_reason) {
      last_reason = st.error_message();
      SayWhyNotConnected(last_reason);
    }
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED || !AwaitReconnect(deadline)) {
      std::string hint = ConnectHint(last_reason, options_.tls.enabled());
      return absl::DeadlineExceededError(absl::StrCat(
          "no rendezvous service answered at ", options_.endpoint, " within the join timeout",
          last_reason.empty() ? "" : " (last error: " + last_reason + ")",
          hint.empty() ? "; is the master node up?" : "; " + hint));
    }
  }
}

void RendezvousClient::SayWhyNotConnected(const std::string& reason) const {
  std::string hint = ConnectHint(reason, options_.tls.enabled());
  if (hint.empty()) {
    spdlog::info("waiting for the rendezvous service at {} ({})", options_.endpoint, reason);
  } else {
    spdlog::warn("cannot connect to the rendezvous at {}: {}; {}; retrying until the join timeout", options_.endpoint,
                 reason, hint);
  }
}

bool RendezvousClient::AwaitClaimRetry(Clock::time_point deadline) {
  const Clock::time_point wake = std::min(deadline, Clock::now() + kClaimRetryDelay);
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&cancelled_), absl::FromChrono(wake - Clock::now()));
  return cancelled_ || Clock::now() < deadline;  // cancelled: the next call returns kShutDown
}

bool RendezvousClient::AwaitReconnect(Clock::time_point deadline) {
  // gRPC reconnects on its own backoff (100 ms to 1 s here); wake when the channel's state moves,
  // at least once a second to notice CancelAll.
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return true;  // the next call returns kShutDown
    }
    if (Clock::now() >= deadline) return false;
    grpc_connectivity_state state = stub_->channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    auto wake = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    auto until = std::chrono::system_clock::now() + (wake - Clock::now());
    if (stub_->channel->WaitForStateChange(state, until) && state == GRPC_CHANNEL_TRANSIENT_FAILURE) return true;
  }
}

template <typename StubT, typename Req, typename Resp>
absl::Status RendezvousClient::Invoke(grpc::Status (StubT::*method)(grpc::ClientContext*, const Req&, Resp*), Req& req,
                                      Resp* resp, std::chrono::milliseconds timeout, StubT* on) {
  *req.mutable_auth() = stub_->auth;
  Call call(this);
  if (call.cancelled) return kShutDown;
  SetDeadline(call.ctx, timeout);
  return FromGrpc(((on ? on : stub_->stub.get())->*method)(&call.ctx, req, resp));
}

absl::StatusOr<NodeView> RendezvousClient::Watch(const std::string& node_id, uint64_t after,
                                                 std::chrono::milliseconds max_wait) {
  v1::WatchRequest req;
  req.set_node_id(node_id);
  req.set_after_version(after);
  v1::WatchResponse resp;
  DT_RETURN_IF_ERROR(Invoke(&v1::Rendezvous::Stub::Watch, req, &resp, max_wait));
  NodeView view = FromWire(resp);
  if (view.assignment) PlaceWorkersStoreAtEndpoint(*view.assignment, options_.endpoint);
  return view;
}

absl::Status RendezvousClient::KeepAlive(const std::string& node_id, std::chrono::milliseconds timeout,
                                         const status::NodeStatus* progress,
                                         std::optional<status::StragglerStatus>* straggler) {
  v1::KeepAliveRequest req;
  req.set_node_id(node_id);
  if (progress) ToWire(*progress, req.mutable_progress());
  v1::KeepAliveResponse resp;
  absl::Status st = Invoke(&v1::Rendezvous::Stub::KeepAlive, req, &resp, timeout);
  if (st.ok() && straggler) *straggler = StragglerFromWire(resp.has_straggler(), resp.straggler());
  return st;
}

absl::Status RendezvousClient::KeepAliveOnANewConnection(const std::string& node_id,
                                                         std::chrono::milliseconds timeout) {
  grpc::ChannelArguments args = stub_->args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own, not the shared one's backoff
  const std::unique_ptr<v1::Rendezvous::Stub> stub =
      v1::Rendezvous::NewStub(grpc::CreateCustomChannel(options_.endpoint, stub_->creds, args));
  v1::KeepAliveRequest req;
  req.set_node_id(node_id);
  v1::KeepAliveResponse resp;
  return Invoke(&v1::Rendezvous::Stub::KeepAlive, req, &resp, timeout, stub.get());
}

absl::Status RendezvousClient::ReportOutcome(const std::string& node_id, int64_t round, bool success,
                                             const std::vector<FailureInfo>& failures) {
  v1::OutcomeRequest req;
  req.set_node_id(node_id);
  req.set_round(round);
  req.set_success(success);
  for (const FailureInfo& f : failures) ToWire(f, req.add_failures());
  v1::OutcomeResponse resp;
  return Invoke(&v1::Rendezvous::Stub::ReportOutcome, req, &resp, kCallTimeout);
}

absl::Status RendezvousClient::Leave(const std::string& node_id) {
  v1::LeaveRequest req;
  req.set_node_id(node_id);
  v1::LeaveResponse resp;
  return Invoke(&v1::Rendezvous::Stub::Leave, req, &resp, std::chrono::seconds(2));
}

absl::StatusOr<JobSummary> RendezvousClient::Status() {
  v1::StatusRequest req;
  v1::StatusResponse resp;
  absl::Status st = Invoke(&v1::Rendezvous::Stub::Status, req, &resp, kCallTimeout);
  if (!st.ok()) return WithConnectHint(st, options_.tls.enabled());
  return FromWire(resp);
}

absl::Status RendezvousClient::Kill(const std::string& reason) {
  v1::KillRequest req;
  req.set_reason(reason);
  v1::KillResponse resp;
  return WithConnectHint(Invoke(&v1::Rendezvous::Stub::Kill, req, &resp, kCallTimeout), options_.tls.enabled());
}

// ---------------------------------------------------------------------------------------------

std::unique_ptr<GrpcRoundSource> GrpcRoundSource::Start(std::unique_ptr<RendezvousClient> client,
                                                        const NodeInfo& node, Clock::time_point join_deadline) {
  std::unique_ptr<GrpcRoundSource> source(new GrpcRoundSource(std::move(client), node));
  // An exception in any of them ends this node cleanly (the agent stops its workers and says why).
  auto fatal = [s = source.get()](const absl::Status& st) { s->Fatal(st); };
  source->watcher_ = std::thread([s = source.get(), join_deadline, fatal] {
    RunGuarded("the rendezvous watch", [&] { s->JoinThenWatch(join_deadline); }, fatal);
  });
  source->keeper_ = std::thread([s = source.get(), fatal] { RunGuarded("the keep-alives", [&] { s->KeepAliveLoop(); }, fatal); });
  source->reporter_ = std::thread([s = source.get(), fatal] { RunGuarded("the outcome reports", [&] { s->ReportLoop(); }, fatal); });
  return source;
}

GrpcRoundSource::GrpcRoundSource(std::unique_ptr<RendezvousClient> client, NodeInfo node)
    : client_(std::move(client)), node_(std::move(node)), event_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void GrpcRoundSource::JoinThenWatch(Clock::time_point join_deadline) {
  absl::StatusOr<JoinResult> join = client_->Join(node_, join_deadline);
  if (!join.ok()) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
  }
  if (!join.ok()) return Fatal(join.status());
  {
    absl::MutexLock lock(&mu_);
    join_ = *join;
    node_id_ = join->node_id;
    joined_ = true;
  }
  WatchLoop();
}

GrpcRoundSource::~GrpcRoundSource() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  client_->CancelAll();  // ends a pending Join or Watch now
  keeper_.join();
  watcher_.join();
  reporter_.join();
  ::close(event_fd_);
}

void GrpcRoundSource::Post() {
  uint64_t one = 1;
  ssize_t ignored = ::write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

void GrpcRoundSource::Fatal(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (fatal_.ok()) fatal_ = status;
  Post();
}

absl::StatusOr<std::optional<NodeView>> GrpcRoundSource::Latest() {
  uint64_t count;
  ssize_t ignored = ::read(event_fd_, &count, sizeof(count));
  (void)ignored;
  absl::MutexLock lock(&mu_);
  if (!fatal_.ok()) return fatal_;
  return latest_;
}

void GrpcRoundSource::WatchLoop() {
  uint64_t after = 0;
  std::string watched;  // the node id `after` belongs to
  int failed = 0;       // watches in a row that failed (the service gone, most likely)
  const auto max_wait = LeaseRules::WatchWait(join_.keep_alive_interval);
  for (;;) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      id = node_id_;
    }
    // Joined again: versions count anew when the service was started again.
    if (id != std::exchange(watched, id)) after = 0;
    absl::StatusOr<NodeView> view = client_->Watch(id, after, max_wait);
    if (view.ok()) {
      failed = 0;
      after = view->version;
      absl::MutexLock lock(&mu_);
      latest_ = *view;
      if (view->assignment) {
        last_group_rank_ = view->assignment->group_rank;
      } else if (view->role == NodeRole::kSpare) {
        last_group_rank_ = -1;
      }
      Post();
      continue;
    }
    switch (view.status().code()) {
      case absl::StatusCode::kDeadlineExceeded:
        break;  // nothing new within max_wait: ask again
      case absl::StatusCode::kNotFound:
        AwaitRejoin(id);  // joined again: the new id's watch starts from version 0 (above)
        break;
      default: {
        // Unavailable, Cancelled by the service's shutdown, or a stream the dying service reset:
        // it is down, unreachable, or stopping (the keep-alive loop decides when it counts as
        // lost, and stops on a refusal). Asked again within a second, a service started again is
        // found then, not at the next keep-alive (5 s apart by default).
        failed = std::min(failed + 1, 64);
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(LeaseRules::WatchRetryDelay(failed)));
      }
    }
  }
}

void GrpcRoundSource::AwaitRejoin(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (node_id_ != id) return;  // joined again already
  forgotten_ = true;           // the keep-alive loop asks now
  mu_.AwaitWithTimeout(absl::Condition(this, &GrpcRoundSource::StoppingOrRemembered),
                       absl::FromChrono(join_.keep_alive_interval));
}

void GrpcRoundSource::KeepAliveLoop() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &GrpcRoundSource::JoinSettled));
    if (!joined_) return;
  }
  LeaseRules lease({join_.keep_alive_interval, join_.keep_alive_max_attempt, kStatusPushInterval}, Clock::now());
  for (;;) {
    std::string id;
    std::optional<status::NodeStatus> status;
    if (!AwaitKeepAliveDue(lease, id, status)) return;
    std::optional<status::StragglerStatus> straggler;
    absl::Status st = client_->KeepAlive(id, join_.keep_alive_interval, status ? &*status : nullptr, &straggler);
    const bool ask_again = st.code() == absl::StatusCode::kUnavailable;
    if (ask_again) {
      // gRPC fails a call at once, without a connect, while it backs off between connects (up to
      // 1 s here). Asked again over a connection of its own, a miss is a service that did not
      // answer, and one started again is found now, not after the lease gave up on it.
      st = client_->KeepAliveOnANewConnection(id, join_.keep_alive_interval);
    }
    bool left;
    {
      absl::MutexLock lock(&mu_);
      left = left_;
    }
    switch (lease.OnAnswer(st, Clock::now(), status.has_value(), left)) {
      case LeaseRules::Next::kContinue:
        if (st.ok() && !ask_again) {  // the bare keep-alive's answer names no straggler
          absl::MutexLock lock(&mu_);
          straggler_ = std::move(straggler);
        }
        break;
      case LeaseRules::Next::kRejoin:
        Rejoin();
        break;
      case LeaseRules::Next::kStop:
        return Fatal(lease.Verdict(client_->endpoint()));
      case LeaseRules::Next::kEnd:
        return;
    }
    absl::MutexLock lock(&mu_);
    forgotten_ = false;  // answered (and joined again if the service said NotFound)
  }
}

bool GrpcRoundSource::AwaitKeepAliveDue(const LeaseRules& lease, std::string& node_id,
                                        std::optional<status::NodeStatus>& status) {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (stopping_ || left_) return false;
    const Clock::time_point now = Clock::now();
    const Clock::time_point due = lease.NextDue(status_.has_value());
    if (now >= due || forgotten_) break;
    // Without a status waiting, one published meanwhile may be due at once.
    mu_.AwaitWithTimeout(status_ ? absl::Condition(this, &GrpcRoundSource::KeepAliveWake)
                                 : absl::Condition(this, &GrpcRoundSource::KeepAliveWakeOrStatus),
                         absl::FromChrono(due - now));
  }
  node_id = node_id_;
  if (status_ && lease.StatusGoesAt(Clock::now())) status = std::exchange(status_, std::nullopt);
  return true;
}

void GrpcRoundSource::PublishStatus(status::NodeStatus node) {
  absl::MutexLock lock(&mu_);
  if (status_ && status_->round == node.round) status::CarryWaitsOver(*status_, node);
  status_ = std::move(node);
}

std::optional<status::StragglerStatus> GrpcRoundSource::Straggler() {
  absl::MutexLock lock(&mu_);
  return straggler_;
}

void GrpcRoundSource::Rejoin() {
  spdlog::warn(
      "the rendezvous service at {} does not know this node (it declared it lost, or it was started "
      "again); joining again",
      client_->endpoint());
  // This agent is the one the service forgot, no predecessor of anyone's: if a restart of this
  // node took the rank meanwhile, this join is refused, and this agent ends.
  NodeInfo again = node_;
  again.predecessor_dead = false;
  {
    // A service started again numbers its rounds from scratch: not at or below the one running here;
    // and counts restarts from zero: not below those the job has spent.
    absl::MutexLock lock(&mu_);
    // Its place in the round it ran: a service started again gives it back (NodeInfo::last_group_rank).
    again.last_group_rank = last_group_rank_;
    if (latest_) {
      again.rounds_seen = std::max<int64_t>(0, latest_->round + 1);
      again.restarts_used = static_cast<int>(std::clamp<int64_t>(latest_->restarts_used, 0, again.rounds_seen));
    }
  }
  absl::StatusOr<JoinResult> join = client_->Join(again, Clock::now() + std::chrono::seconds(30));
  if (!join.ok()) return Fatal(join.status());
  bool left;
  {
    absl::MutexLock lock(&mu_);
    node_id_ = join->node_id;
    left = left_;
  }
  // Leave() came while this join was under way and named the id before it: leave as this one too.
  if (left) client_->Leave(join->node_id).IgnoreError();
}

std::string GrpcRoundSource::NodeId() {
  absl::MutexLock lock(&mu_);
  return node_id_;
}

void GrpcRoundSource::ReportSuccess(int64_t round) { Queue(Report{round, true, {}}); }

void GrpcRoundSource::ReportFailure(int64_t round, const std::vector<FailureInfo>& failures) {
  Queue(Report{round, false, failures});
}

void GrpcRoundSource::Queue(Report report) {
  absl::MutexLock lock(&mu_);
  report_ = std::move(report);  // a newer round's report replaces an undelivered older one
  ++reports_queued_;
}

void GrpcRoundSource::ReportLoop() {
  for (;;) {
    Report report;
    uint64_t queued;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || report_.has_value(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      report = *report_;
      queued = reports_queued_;
    }
    if (!Deliver(report)) return;
    absl::MutexLock lock(&mu_);
    if (reports_queued_ == queued) report_.reset();  // else a newer one came meanwhile
  }
}

bool GrpcRoundSource::Deliver(const Report& report) {
  const char* what = report.success ? "success" : "a failure";
  for (int attempt = 1;; ++attempt) {
    absl::Status st = client_->ReportOutcome(NodeId(), report.round, report.success, report.failures);
    // Aborted: the round is over already (another node's report, or this one's first delivery).
    if (st.ok() || st.code() == absl::StatusCode::kAborted) return true;
    if (st.code() == absl::StatusCode::kUnauthenticated || st.code() == absl::StatusCode::kPermissionDenied) {
      Fatal(st);
      return false;
    }
    if (attempt == 1) spdlog::warn("reporting {} of round {}: {}; retrying", what, report.round, st.ToString());
    absl::MutexLock lock(&mu_);
    const uint64_t queued = reports_queued_;
    auto stop_or_newer = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || reports_queued_ != queued; };
    mu_.AwaitWithTimeout(absl::Condition(&stop_or_newer), absl::FromChrono(LeaseRules::ReportRetryDelay(attempt)));
    if (stopping_) return false;
    if (reports_queued_ != queued) return true;  // superseded
  }
}

// A node that left must not come back: a keep-alive answered after the service forgot it (NotFound)
// would otherwise join it again, and the other nodes would re-form twice more (with it, and once
// it is lost), as a loaded CI machine showed.
void GrpcRoundSource::Leave() {
  std::string id;
  {
    absl::MutexLock lock(&mu_);
    left_ = true;
    id = node_id_;
  }
  client_->Leave(id).IgnoreError();
}

}  // namespace dtrun::rdzv

#include "rendezvous/rendezvous_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/endpoint.h"
#include "base/random_hex.h"
#include "base/status_macros.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/tls_check.h"
#include "rendezvous/wire.h"
#include "rendezvous/workers_store.h"
#include "spdlog/spdlog.h"

namespace dtrun::rdzv {
namespace {

// Each start of the service gives node ids of its own (RendezvousOptions::instance).
RendezvousOptions WithInstance(RendezvousOptions options) {
  if (options.instance.empty()) options.instance = RandomHex(8);
  return options;
}

using Clock = std::chrono::steady_clock;


class Service;

// A parked Watch: answered by Service::Notify when the version moves, or cancelled.
class WatchReactor : public grpc::ServerUnaryReactor {
 public:
  WatchReactor(Service* service, std::string node_id, uint64_t after, v1::WatchResponse* response)
      : service_(service), node_id_(std::move(node_id)), after_(after), response_(response) {}
  void OnCancel() override;
  void OnDone() override { delete this; }

  Service* service_;
  std::string node_id_;
  uint64_t after_;
  v1::WatchResponse* response_;
};

class Service final : public v1::Rendezvous::CallbackService {
 public:
  Service(const RendezvousOptions& options)
      : options_(options), state_(WithInstance(options), Clock::now()), timer_([this] { TimerLoop(); }) {}

  ~Service() override {
    StopWatches();
    timer_.join();
  }

  // Answers every parked Watch and makes new ones answer at once, so the server can shut down.
  void StopWatches() {
    std::vector<WatchReactor*> parked;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (auto& [id, r] : parked_) parked.push_back(r);
      parked_.clear();
      wake_.Signal();
    }
    for (WatchReactor* r : parked) r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "rendezvous service shutting down"));
  }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const v1::JoinRequest* req,
                                 v1::JoinResponse* resp) override {
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      DT_ASSIGN_OR_RETURN(std::string id, state_.Join(FromWire(*req), Clock::now()));
      resp->set_node_id(id);
      resp->set_version(state_.version());
      resp->set_keep_alive_interval_ms(options_.keep_alive_interval.count());
      resp->set_keep_alive_max_attempt(options_.keep_alive_max_attempt);
      resp->set_exit_barrier_timeout_ms(options_.exit_barrier_timeout.count());
      resp->set_round(state_.round());
      return absl::OkStatus();
    }, req->auth());
  }

  grpc::ServerUnaryReactor* KeepAlive(grpc::CallbackServerContext* ctx, const v1::KeepAliveRequest* req,
                                      v1::KeepAliveResponse* resp) override {
    std::optional<status::NodeStatus> progress;
    if (req->has_progress()) progress = FromWire(req->progress());  // converted outside the lock
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      resp->set_round(state_.round());
      absl::Status st = state_.KeepAlive(req->node_id(), Clock::now());
      if (st.ok() && progress) {
        // A bad summary costs the node its status rows, never its lease.
        absl::Status shown = state_.SetProgress(req->node_id(), std::move(*progress));
        if (!shown.ok() && rejected_progress_++ % 1000 == 0) {
          spdlog::warn("ignored a status summary ({} so far): {}", rejected_progress_, std::string(shown.message()));
        }
      }
      if (st.ok()) state_.MaybeReplaceStraggler(Clock::now());  // its watchers are answered below
      if (st.ok() && state_.straggler()) ToWire(*state_.straggler(), resp->mutable_straggler());
      return st;
    }, req->auth());
  }

  grpc::ServerUnaryReactor* ReportOutcome(grpc::CallbackServerContext* ctx, const v1::OutcomeRequest* req,
                                          v1::OutcomeResponse* resp) override {
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      absl::Status st;
      if (req->success()) {
        st = state_.ReportSuccess(req->node_id(), req->round(), Clock::now());
      } else {
        st = state_.ReportFailure(req->node_id(), req->round(), FailuresFromWire(*req), Clock::now());
      }
      resp->set_round(state_.round());
      return st;
    }, req->auth());
  }

  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const v1::LeaveRequest* req,
                                  v1::LeaveResponse* resp) override {
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      absl::Status st = state_.Leave(req->node_id(), Clock::now());
      resp->set_round(state_.round());
      return st;
    }, req->auth());
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx, const v1::StatusRequest* req,
                                   v1::StatusResponse* resp) override {
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      JobSummary s = state_.Summary();
      s.progress = state_.Progress();
      s.straggler = state_.straggler();
      ToWire(s, resp);
      return absl::OkStatus();
    }, req->auth());
  }

  grpc::ServerUnaryReactor* Kill(grpc::CallbackServerContext* ctx, const v1::KillRequest* req,
                                 v1::KillResponse* resp) override {
    return Respond(ctx, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      state_.Kill(req->reason().empty() ? "killed by dtrun kill" : req->reason());
      resp->set_round(state_.round());
      return absl::OkStatus();
    }, req->auth());
  }

  grpc::ServerUnaryReactor* Watch(grpc::CallbackServerContext* ctx, const v1::WatchRequest* req,
                                  v1::WatchResponse* resp) override {
    auto* reactor = new WatchReactor(this, req->node_id(), req->after_version(), resp);
    absl::Status st;
    {
      absl::MutexLock lock(&mu_);
      st = CheckCredentials(req->auth());
      if (st.ok()) {
        absl::StatusOr<NodeView> view = state_.View(req->node_id());
        if (!view.ok()) {
          st = view.status();
        } else if (view->version > req->after_version() || stopping_) {
          ToWire(*view, resp);
        } else {
          parked_.emplace(req->node_id(), reactor);  // answered by TakeAnswersLocked or OnCancel
          return reactor;
        }
      }
    }
    reactor->Finish(ToGrpc(st));
    return reactor;
  }

  void AwaitNoNodes(std::chrono::milliseconds timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Service::NoNodes), absl::FromChrono(timeout));
  }

  void AwaitOver() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &Service::Over));
  }

  void Cancel(WatchReactor* reactor) {
    {
      absl::MutexLock lock(&mu_);
      auto range = parked_.equal_range(reactor->node_id_);
      auto it = std::find_if(range.first, range.second, [&](const auto& p) { return p.second == reactor; });
      if (it == range.second) return;  // already answered
      parked_.erase(it);
    }
    reactor->Finish(grpc::Status::CANCELLED);
  }

 private:
  // Runs `op` under the lock after the credential check, answers, and wakes watchers if the
  // state moved. Every path finishes the reactor exactly once.
  template <typename Op>
  grpc::ServerUnaryReactor* Respond(grpc::CallbackServerContext* ctx, Op op, const v1::Credentials& auth) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::Status st;
    std::vector<std::pair<WatchReactor*, grpc::Status>> answers;
    {
      absl::MutexLock lock(&mu_);
      uint64_t before = state_.version();
      st = CheckCredentials(auth);
      if (st.ok()) st = op();
      if (state_.version() != before) {
        answers = TakeAnswersLocked();
        SayIfTheStoreIsTooSmall();
      }
      WakeTimerIfSooner();
    }
    reactor->Finish(ToGrpc(st));
    for (auto& [r, s] : answers) r->Finish(s);
    return reactor;
  }

  bool NoNodes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !state_.has_nodes(); }
  bool Over() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_) return true;
    const JobPhase phase = state_.phase();
    return !state_.has_nodes() &&
           (phase == JobPhase::kSucceeded || phase == JobPhase::kFailed || phase == JobPhase::kKilled);
  }

  absl::Status CheckCredentials(const v1::Credentials& auth) const {
    return CheckJobCredentials(auth, options_.run_id, options_.token);
  }

  // Collects the parked watchers whose node's view moved; they are answered outside the lock.
  std::vector<std::pair<WatchReactor*, grpc::Status>> TakeAnswersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::pair<WatchReactor*, grpc::Status>> out;
    RendezvousState::Touched touched = state_.TakeTouched();
    auto answer = [&](std::multimap<std::string, WatchReactor*>::iterator it)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      WatchReactor* r = it->second;
      absl::StatusOr<NodeView> view = state_.View(r->node_id_);
      if (view.ok() && view->version <= r->after_) return std::next(it);
      if (view.ok()) ToWire(*view, r->response_);
      out.emplace_back(r, view.ok() ? grpc::Status::OK : ToGrpc(view.status()));
      return parked_.erase(it);
    };
    if (touched.all) {
      for (auto it = parked_.begin(); it != parked_.end();) it = answer(it);
      return out;
    }
    for (const std::string& node : touched.nodes) {
      for (auto it = parked_.lower_bound(node); it != parked_.end() && it->first == node;) it = answer(it);
    }
    return out;
  }

  // Once per round with more workers than the store on this endpoint takes: before its workers
  // start and are refused.
  void SayIfTheStoreIsTooSmall() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (state_.phase() != JobPhase::kRunning || state_.round() == checked_round_) return;
    checked_round_ = state_.round();
    const std::string warning =
        StoreTooSmallWarning(state_.round(), state_.world_size(), options_.workers_store_capacity);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }

  // A keep-alive only moves a deadline later: the timer wakes for the earlier one and looks again.
  // Waking it on every call cost a thread switch per keep-alive.
  void WakeTimerIfSooner() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::optional<TimePoint> next = state_.NextDeadline();
    if (next && (!timer_until_ || *next < *timer_until_)) wake_.Signal();
  }

  void TimerLoop() {
    for (;;) {
      std::vector<std::pair<WatchReactor*, grpc::Status>> answers;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        std::optional<TimePoint> deadline = state_.NextDeadline();
        timer_until_ = deadline;
        if (deadline) {
          auto wait = std::chrono::duration_cast<std::chrono::microseconds>(*deadline - Clock::now());
          if (wait.count() > 0) wake_.WaitWithTimeout(&mu_, absl::Microseconds(wait.count()));
        } else {
          wake_.Wait(&mu_);
        }
        if (stopping_) return;
        uint64_t before = state_.version();
        state_.Tick(Clock::now());
        if (state_.version() != before) {
          answers = TakeAnswersLocked();
          SayIfTheStoreIsTooSmall();
        }
      }
      for (auto& [r, s] : answers) r->Finish(s);
    }
  }

  const RendezvousOptions options_;
  absl::Mutex mu_;
  absl::CondVar wake_;
  RendezvousState state_ ABSL_GUARDED_BY(mu_);
  int64_t rejected_progress_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checked_round_ ABSL_GUARDED_BY(mu_) =
      -1;  // the last round held against the store's capacity  // status summaries that broke the bounds
  std::multimap<std::string, WatchReactor*> parked_ ABSL_GUARDED_BY(mu_);  // by node id
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<TimePoint> timer_until_ ABSL_GUARDED_BY(mu_);  // what the timer sleeps until (none: forever)
  std::thread timer_;
};

void WatchReactor::OnCancel() { service_->Cancel(this); }

class ServerImpl final : public RendezvousServer {
 public:
  ServerImpl(std::unique_ptr<Service> service, std::shared_ptr<grpc::Service> beside,
             std::unique_ptr<grpc::Server> server, int port, bool plaintext)
      : service_(std::move(service)),
        beside_(std::move(beside)),
        server_(std::move(server)),
        port_(port),
        plaintext_(plaintext) {}
  ~ServerImpl() override {
    service_->StopWatches();  // parked long-polls are answered, so Shutdown does not wait on them
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
    service_.reset();
  }
  int port() const override { return port_; }
  void AwaitNodesLeft(std::chrono::milliseconds timeout) override { service_->AwaitNoNodes(timeout); }
  void AwaitJobOver() override { service_->AwaitOver(); }
  void Stop() override { service_->StopWatches(); }
  bool adopts_connections() const override { return plaintext_; }
  void Adopt(int fd) override {
    if (!plaintext_) {
      ::close(fd);
      return;
    }
    grpc::AddInsecureChannelFromFd(server_.get(), fd);
  }

 private:
  std::unique_ptr<Service> service_;
  std::shared_ptr<grpc::Service> beside_;
  std::unique_ptr<grpc::Server> server_;
  int port_;
  bool plaintext_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(const std::string& host, int port,
                                                                          const RendezvousOptions& options,
                                                                          const TlsCredentials& tls,
                                                                          std::shared_ptr<grpc::Service> beside) {
  RouteGrpcLogs();
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (tls.enabled()) {
    DT_RETURN_IF_ERROR(CheckTlsCredentials(tls));
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
    ssl.pem_root_certs = tls.ca_pem;
    creds = grpc::SslServerCredentials(ssl);
    ReportServerHandshakes();
  }
  auto service = std::make_unique<Service>(options);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second service would silently share the port and split
  // the nodes between two rendezvous. One port, one service.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int selected = 0;
  std::string addr = FormatEndpoint(host, port);
  builder.AddListeningPort(addr, creds, &selected);
  builder.RegisterService(service.get());
  if (beside) builder.RegisterService(beside.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || selected == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve the rendezvous on ", addr,
                                               " (address in use or not on this host); choose another port"));
  }
  return std::unique_ptr<RendezvousServer>(
      new ServerImpl(std::move(service), std::move(beside), std::move(server), selected, !tls.enabled()));
}

}  // namespace dtrun::rdzv

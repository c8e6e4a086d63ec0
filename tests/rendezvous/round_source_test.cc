// GrpcRoundSource against a scripted service: outcome reports never block the agent's loop, and a
// report the service could not take is sent again until it is. Against the real service: one
// started again is joined again as soon as it answers.
#include <grpcpp/grpcpp.h>
#include <poll.h>

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::seconds;

// Joins every node; the first outcome report hangs until the test releases it and then fails, the
// second fails, the third is taken.
class ScriptedService final : public v1::Rendezvous::Service {
 public:
  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse* resp) override {
    resp->set_node_id("n0");
    resp->set_keep_alive_interval_ms(1000);
    resp->set_keep_alive_max_attempt(30);
    absl::MutexLock lock(&mu);
    joined = true;
    return grpc::Status::OK;
  }
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*, v1::WatchResponse*) override {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted: no views");
  }
  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*, v1::KeepAliveResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status ReportOutcome(grpc::ServerContext*, const v1::OutcomeRequest* req, v1::OutcomeResponse*) override {
    absl::MutexLock lock(&mu);
    const int call = ++reports;
    if (call == 1) {
      release_timed_out = !mu.AwaitWithTimeout(absl::Condition(&released), absl::Seconds(20));
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "scripted: not now");
    }
    if (call == 2) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "scripted: too slow");
    delivered_round = req->round();
    delivered_rank = req->failures_size() > 0 ? req->failures(0).global_rank() : -1;
    return grpc::Status::OK;
  }
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveResponse*) override {
    return grpc::Status::OK;
  }

  absl::Mutex mu;
  bool joined ABSL_GUARDED_BY(mu) = false;
  bool released ABSL_GUARDED_BY(mu) = false;
  bool release_timed_out ABSL_GUARDED_BY(mu) = false;
  int reports ABSL_GUARDED_BY(mu) = 0;
  int64_t delivered_round ABSL_GUARDED_BY(mu) = -1;
  int delivered_rank ABSL_GUARDED_BY(mu) = -1;
};

TEST(GrpcRoundSourceTest, AFailureReportReturnsAtOnceAndIsRetriedUntilTheServiceTakesIt) {
  ScriptedService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);

  ClientOptions options;
  options.endpoint = "127.0.0.1:" + std::to_string(port);
  auto client = RendezvousClient::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::unique_ptr<GrpcRoundSource> source = GrpcRoundSource::Start(
      std::move(*client), NodeInfo{"h0", 1, "127.0.0.1", 1, -1, "", 0}, std::chrono::steady_clock::now() + seconds(20));
  {
    absl::MutexLock lock(&service.mu);
    ASSERT_TRUE(service.mu.AwaitWithTimeout(absl::Condition(&service.joined), absl::Seconds(20)));
  }
  FailureInfo failure;
  failure.global_rank = 5;
  failure.exit_code = 1;
  source->ReportFailure(3, {failure});  // the service holds this call: it must not hold us
  {
    absl::MutexLock lock(&service.mu);
    service.released = true;
    auto third = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(service.mu) { return service.reports >= 3; };
    ASSERT_TRUE(service.mu.AwaitWithTimeout(absl::Condition(&third), absl::Seconds(20))) << service.reports;
    EXPECT_FALSE(service.release_timed_out);  // ReportFailure returned while the first call hung
    EXPECT_EQ(service.reports, 3);
    EXPECT_EQ(service.delivered_round, 3);
    EXPECT_EQ(service.delivered_rank, 5);
  }
  source.reset();
  server->Shutdown(std::chrono::system_clock::now() + seconds(2));
}

// Waits on the source's eventfd for a view that satisfies `wanted`; the last view seen otherwise.
template <typename Pred>
std::optional<NodeView> AwaitView(GrpcRoundSource& source, Pred wanted,
                                  std::chrono::steady_clock::time_point deadline) {
  std::optional<NodeView> last;
  for (auto now = std::chrono::steady_clock::now(); now < deadline; now = std::chrono::steady_clock::now()) {
    pollfd fd{source.event_fd(), POLLIN, 0};
    ::poll(&fd, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()));
    absl::StatusOr<std::optional<NodeView>> view = source.Latest();
    if (!view.ok()) {
      ADD_FAILURE() << view.status();
      return last;
    }
    if (*view) last = **view;
    if (last && wanted(*last)) return last;
  }
  return last;
}

// The service's host started again (its dtrun restarted by a supervisor): the new service knows
// no node. The node finds it as soon as gRPC reconnects and joins again then, not at its next
// keep-alive (a minute away here, past this test's bound), and brings the restarts spent.
TEST(GrpcRoundSourceTest, ANodeJoinsAServiceStartedAgainAtOnceWithTheRestartsSpent) {
  using Clock = std::chrono::steady_clock;
  RendezvousOptions options;
  options.min_nodes = options.max_nodes = 1;
  options.static_ranks = false;
  options.run_id = "job";
  options.keep_alive_interval = seconds(60);
  options.max_restarts = 3;
  auto first = RendezvousServer::Start("127.0.0.1", 0, options);
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  ClientOptions client_options;
  client_options.endpoint = "127.0.0.1:" + std::to_string(port);
  client_options.run_id = "job";
  auto client = RendezvousClient::Create(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  std::unique_ptr<GrpcRoundSource> source = GrpcRoundSource::Start(
      std::move(*client), NodeInfo{"h0", 1, "127.0.0.1", 1, -1, "", 0}, Clock::now() + seconds(20));
  auto running = [](const NodeView& v) { return v.phase == JobPhase::kRunning && v.assignment.has_value(); };
  std::optional<NodeView> first_round = AwaitView(*source, running, Clock::now() + seconds(20));
  ASSERT_TRUE(first_round && running(*first_round)) << "the first round did not form";
  FailureInfo failure;
  failure.exit_code = 1;
  source->ReportFailure(first_round->round, {failure});  // one restart spent
  auto restarted = [&](const NodeView& v) { return running(v) && v.round > first_round->round; };
  std::optional<NodeView> before = AwaitView(*source, restarted, Clock::now() + seconds(20));
  ASSERT_TRUE(before && restarted(*before)) << "the failure did not restart the round";
  ASSERT_EQ(before->restarts_used, 1);

  first->reset();  // its host's dtrun is gone
  auto second = RendezvousServer::Start("127.0.0.1", port, options);
  ASSERT_TRUE(second.ok()) << second.status();
  auto newer = [&](const NodeView& v) { return running(v) && v.round > before->round; };
  std::optional<NodeView> after = AwaitView(*source, newer, Clock::now() + seconds(30));
  ASSERT_TRUE(after && newer(*after)) << "not joined again within 30 s; the next keep-alive is 60 s after the last";
  EXPECT_EQ(after->assignment->world_size, 1);
  EXPECT_EQ(after->restarts_used, 1);  // the new instance goes on from the job's budget
  source.reset();
}

}  // namespace
}  // namespace dtrun::rdzv

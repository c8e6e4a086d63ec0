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

// One node of an elastic job on a service that the test stops and starts again on the same port,
// as a supervisor restarts the service's host's dtrun: the new service knows no node.
class ServiceStartedAgainTest : public ::testing::Test {
 protected:
  using Clock = std::chrono::steady_clock;
  ServiceStartedAgainTest() {
    options_.min_nodes = options_.max_nodes = 1;
    options_.static_ranks = false;
    options_.run_id = "job";
    options_.keep_alive_interval = seconds(60);  // past every bound here: no keep-alive finds it
    client_options_.run_id = "job";
  }
  // The service and the node on it, through the node's first round.
  void StartNode() {
    auto service = RendezvousServer::Start("127.0.0.1", 0, options_);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = std::move(*service);
    port_ = service_->port();
    client_options_.endpoint = "127.0.0.1:" + std::to_string(port_);
    auto client = RendezvousClient::Create(client_options_);
    ASSERT_TRUE(client.ok()) << client.status();
    source_ = GrpcRoundSource::Start(std::move(*client), NodeInfo{"h0", 1, "127.0.0.1", 1, -1, "", 0},
                                     Clock::now() + seconds(20));
    first_round_ = AwaitView(*source_, Running, Clock::now() + seconds(20));
    ASSERT_TRUE(first_round_ && Running(*first_round_)) << "the first round did not form";
  }
  void StartServiceAgain() {
    service_.reset();
    auto again = RendezvousServer::Start("127.0.0.1", port_, options_);
    ASSERT_TRUE(again.ok()) << again.status();
    service_ = std::move(*again);
  }
  // The node's first view of a round above `round`.
  std::optional<NodeView> AwaitRoundAbove(int64_t round) {
    auto newer = [round](const NodeView& v) { return Running(v) && v.round > round; };
    std::optional<NodeView> view = AwaitView(*source_, newer, Clock::now() + seconds(30));
    return view && newer(*view) ? view : std::nullopt;
  }
  static bool Running(const NodeView& v) { return v.phase == JobPhase::kRunning && v.assignment.has_value(); }

  RendezvousOptions options_;
  ClientOptions client_options_;
  int port_ = 0;
  std::unique_ptr<RendezvousServer> service_;
  std::unique_ptr<GrpcRoundSource> source_;  // declared after service_: stopped before it
  std::optional<NodeView> first_round_;
};

// The node finds the new service as soon as gRPC reconnects and joins again then, not at its next
// keep-alive (a minute away here, past this test's bound), and brings the restarts spent.
TEST_F(ServiceStartedAgainTest, ANodeJoinsItAtOnceWithTheRestartsSpent) {
  options_.max_restarts = 3;
  ASSERT_NO_FATAL_FAILURE(StartNode());
  FailureInfo failure;
  failure.exit_code = 1;
  source_->ReportFailure(first_round_->round, {failure});  // one restart spent
  std::optional<NodeView> before = AwaitRoundAbove(first_round_->round);
  ASSERT_TRUE(before) << "the failure did not restart the round";
  ASSERT_EQ(before->restarts_used, 1);
  ASSERT_NO_FATAL_FAILURE(StartServiceAgain());
  std::optional<NodeView> after = AwaitRoundAbove(before->round);
  ASSERT_TRUE(after) << "not joined again within 30 s; the next keep-alive is 60 s after the last";
  EXPECT_EQ(after->assignment->world_size, 1);
  EXPECT_EQ(after->restarts_used, 1);  // the new instance goes on from the job's budget
}

// The node tells the new service where it was: group rank 0, which a newcomer asks for by its
// --node-rank hint. The place it held wins, and the newcomer takes the other.
TEST_F(ServiceStartedAgainTest, ANodeTellsItThePlaceItHeld) {
  ASSERT_NO_FATAL_FAILURE(StartNode());
  ASSERT_EQ(first_round_->assignment->group_rank, 0);
  options_.min_nodes = options_.max_nodes = 2;  // the job has room for one more now
  ASSERT_NO_FATAL_FAILURE(StartServiceAgain());
  auto newcomer = RendezvousClient::Create(client_options_);
  ASSERT_TRUE(newcomer.ok()) << newcomer.status();
  auto joined =
      (*newcomer)->Join(NodeInfo{"h1", 1, "127.0.0.2", 1, /*node rank hint=*/0, "", 0}, Clock::now() + seconds(20));
  ASSERT_TRUE(joined.ok()) << joined.status();
  std::optional<NodeView> after = AwaitRoundAbove(first_round_->round);
  ASSERT_TRUE(after) << "not joined again within 30 s";
  EXPECT_EQ(after->assignment->group_rank, 0);
  EXPECT_EQ(after->assignment->group_world_size, 2);
  absl::StatusOr<NodeView> theirs = (*newcomer)->Watch(joined->node_id, 0, std::chrono::milliseconds(5000));
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_TRUE(theirs->assignment.has_value());
  EXPECT_EQ(theirs->assignment->group_rank, 1);
}

}  // namespace
}  // namespace dtrun::rdzv

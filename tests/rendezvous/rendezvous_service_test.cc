// The gRPC adapter over real sockets (loopback): credentials, long-poll, stale rounds.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/wire.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class RendezvousServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.min_nodes = options_.max_nodes = 2;
    options_.static_ranks = true;
    options_.max_restarts = 3;
    options_.run_id = "job";
    options_.token = "secret";
    auto s = RendezvousServer::Start("127.0.0.1", 0, options_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<RendezvousClient> Client(const std::string& token = "secret", const std::string& run = "job") {
    ClientOptions o;
    o.endpoint = "127.0.0.1:" + std::to_string(server_->port());
    o.run_id = run;
    o.token = token;
    return std::move(RendezvousClient::Create(o).value());
  }
  static NodeInfo Node(int rank) { return NodeInfo{"h" + std::to_string(rank), 1, "127.0.0.1", 1, rank, "", 0}; }

  RendezvousOptions options_;
  std::unique_ptr<RendezvousServer> server_;
};

TEST_F(RendezvousServiceTest, WrongTokenRunIdAreRejectedWithoutDisturbingTheJob) {
  auto deadline = Clock::now() + seconds(5);
  EXPECT_EQ(Client("bad")->Join(Node(0), deadline).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Client("secret", "other")->Join(Node(0), deadline).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto summary = Client()->Status();
  ASSERT_TRUE(summary.ok());
  EXPECT_TRUE(summary->nodes.empty());
}

TEST_F(RendezvousServiceTest, WatchLongPollIsAnsweredWhenTheRoundForms) {
  auto a = Client(), b = Client();
  auto ja = a->Join(Node(0), Clock::now() + seconds(5));
  ASSERT_TRUE(ja.ok()) << ja.status();
  auto first = a->Watch(ja->node_id, 0, seconds(5));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->phase, JobPhase::kForming);
  absl::StatusOr<NodeView> formed;
  std::thread waiter([&] { formed = a->Watch(ja->node_id, first->version, seconds(10)); });
  auto jb = b->Join(Node(1), Clock::now() + seconds(5));
  ASSERT_TRUE(jb.ok());
  waiter.join();
  ASSERT_TRUE(formed.ok()) << formed.status();
  EXPECT_EQ(formed->phase, JobPhase::kRunning);
  EXPECT_EQ(formed->assignment->world_size, 2);
}

TEST_F(RendezvousServiceTest, StaleRoundReportIsAborted) {
  auto a = Client(), b = Client();
  auto ja = a->Join(Node(0), Clock::now() + seconds(5));
  auto jb = b->Join(Node(1), Clock::now() + seconds(5));
  ASSERT_TRUE(ja.ok() && jb.ok());
  FailureInfo f;
  f.host = "h1";
  EXPECT_TRUE(b->ReportOutcome(jb->node_id, 0, false, {f}).ok());
  EXPECT_EQ(a->ReportOutcome(ja->node_id, 0, false, {f}).code(), absl::StatusCode::kAborted);
  auto view = a->Watch(ja->node_id, 0, seconds(5));
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->round, 1);
}

TEST_F(RendezvousServiceTest, WatchTimesOutWithDeadlineExceeded) {
  auto a = Client();
  auto ja = a->Join(Node(0), Clock::now() + seconds(5));
  auto v = a->Watch(ja->node_id, 0, seconds(5));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(a->Watch(ja->node_id, v->version, milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousServiceTest, JoinWaitsForAServiceThatIsNotUpAndGivesUpAtTheDeadline) {
  ClientOptions o;
  o.endpoint = "127.0.0.1:1";  // nothing listens there
  auto c = RendezvousClient::Create(o);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Join(Node(0), Clock::now() + milliseconds(300));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.status().message().find("is the master node up"), std::string::npos);
}

// gRPC waits between connects (100 ms growing to 1 s here) and fails a call at once while it
// waits. The keep-alive loop asks again over a connection of its own, which connects now: the
// last keep-alive of a lease does not give up on a service that came back a moment before it.
TEST(RendezvousClientTest, AKeepAliveOnANewConnectionConnectsWhileTheSharedOneBacksOff) {
  // A port that refuses connections until the test listens on it (bound: nobody else takes it).
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ClientOptions o;
  o.endpoint = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  o.run_id = "job";
  auto c = RendezvousClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->KeepAlive("n", seconds(5), nullptr, nullptr).code(), absl::StatusCode::kUnavailable);  // refused
  ASSERT_EQ(::listen(fd, 4), 0);  // something is there now (it accepts, and never answers)
  // Connected, then nobody answered: the deadline. On the shared connection's backoff it would
  // have failed at once (UNAVAILABLE) without a connect.
  const absl::Status again = (*c)->KeepAliveOnANewConnection("n", milliseconds(300));
  EXPECT_EQ(again.code(), absl::StatusCode::kDeadlineExceeded) << again;
  pollfd connected{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&connected, 1, 0), 1) << "no connection came";
  ::close(fd);
}

// A failure's kind crosses the wire as a word; a word this build does not know is a plain exit.
TEST(FailureWireTest, KindsRoundTripAndAnUnknownWordIsAnExit) {
  for (FailureKind kind : {FailureKind::kExited, FailureKind::kHang, FailureKind::kNoProgress}) {
    FailureInfo f;
    f.kind = kind;
    v1::Failure wire;
    ToWire(f, &wire);
    EXPECT_EQ(FromWire(wire).kind, kind) << wire.kind();
  }
  v1::Failure future;
  future.set_kind(std::string(1 << 16, 'x'));
  EXPECT_EQ(FromWire(future).kind, FailureKind::kExited);
}

// Where a node's copies are, and its buddy's failure domain, cross the wire; an agent takes no more
// places to fetch from than it would try, whatever the service sends.
TEST(AssignmentWireTest, WhereTheCopiesAreRoundTripsAndIsBounded) {
  NodeView view;
  view.phase = JobPhase::kRunning;
  view.role = NodeRole::kMember;
  view.assignment = Assignment{};
  view.assignment->buddy_addr = "10.0.0.2";
  view.assignment->buddy_port = 29500;
  view.assignment->buddy_failure_domain = "leaf-2";
  view.assignment->copies_at = {{"10.0.0.5", 29500}, {"10.0.0.6", 31000}};
  v1::WatchResponse wire;
  ToWire(view, &wire);
  const NodeView back = FromWire(wire);
  ASSERT_TRUE(back.assignment);
  EXPECT_EQ(back.assignment->copies_at, view.assignment->copies_at);
  EXPECT_EQ(back.assignment->buddy_failure_domain, "leaf-2");
  for (int i = 0; i < 1000; ++i) {
    v1::ReplicaEndpoint* e = wire.mutable_assignment()->add_copies_at();
    e->set_addr("10.1.0.1");
    e->set_port(1);
  }
  EXPECT_EQ(FromWire(wire).assignment->copies_at.size(), kCopyHolders);

  v1::JoinRequest join;
  join.set_failure_domain("leaf-1");
  EXPECT_EQ(FromWire(join).failure_domain, "leaf-1");
}

}  // namespace
}  // namespace dtrun::rdzv

// Buddy copies over real gRPC on loopback: a pushed copy is kept and fetched back whole; the
// wrong token, a corrupted copy and a dead buddy are refused with a message; with the job's TLS
// files, buddies whose certificates chain to the job's CA talk whatever address the certificates
// name, and others do not. The rendezvous host serves its copies beside the rendezvous, through
// the declared port its store relays from; a port that is taken is refused, for the caller to
// take another.
#include "replica/replica_grpc.h"

#include "agent/tcp_store_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tls_files.h"

namespace dtrun::replica {
namespace {

constexpr uint64_t kJob = 7;

snapshot::SlotHeader HeaderOf(int64_t rank, int64_t step, const std::string& payload) {
  return snapshot::SlotHeader{kJob, rank, 2, step, 0, payload.size(),
                              snapshot::PayloadHash(payload.data(), payload.size()), 0};
}

// Bytes for Push, owned by themselves.
SharedBytes Shared(std::string bytes) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  return {*owned, owned};
}

class ReplicaGrpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_.run_id = "job";
    job_.token = "secret";
    Serve(job_);
  }
  void Serve(const rdzv::ClientOptions& job) {
    server_.reset();
    keeper_ = std::make_shared<ReplicaKeeper>(kJob, 64 << 20, 4);
    absl::StatusOr<std::unique_ptr<ReplicaServer>> s = StartReplicaServer("127.0.0.1", 0, job, keeper_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  std::unique_ptr<BuddyChannel> Connect(const std::string& token = "secret", const rdzv::TlsCredentials& tls = {}) {
    rdzv::ClientOptions job = job_;
    job.token = token;
    job.tls = tls;
    return ConnectBuddy("127.0.0.1", server_->port(), job, kJob, 64 << 20);
  }
  static bool NoPause(double) { return true; }
  rdzv::ClientOptions job_;
  std::shared_ptr<ReplicaKeeper> keeper_;
  std::unique_ptr<ReplicaServer> server_;
};

TEST_F(ReplicaGrpcTest, APushedCopyIsKeptAndFetchedBackWhole) {
  std::string payload(3 * kChunkBytes + 123, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31);
  std::unique_ptr<BuddyChannel> buddy = Connect();
  int chunks = 0;
  absl::StatusOr<int64_t> kept =
      buddy->Push(HeaderOf(1, 12, payload), Shared(payload), [&](double) { return ++chunks > 0; });
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, 12);
  EXPECT_EQ(chunks, 4);
  ASSERT_TRUE(buddy->Push(HeaderOf(1, 14, "newer"), Shared("newer"), NoPause).ok());
  absl::StatusOr<std::vector<Copy>> copies = buddy->Fetch(1, 2, std::chrono::seconds(10));
  ASSERT_TRUE(copies.ok()) << copies.status();
  ASSERT_EQ(copies->size(), 2u);
  EXPECT_EQ((*copies)[0].header.step, 14);
  EXPECT_EQ((*copies)[1].header.step, 12);
  EXPECT_EQ((*copies)[1].payload, payload);
  absl::StatusOr<std::vector<Copy>> none = buddy->Fetch(0, 2, std::chrono::seconds(10));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(ReplicaGrpcTest, RefusesTheWrongTokenAndACorruptedCopy) {
  absl::StatusOr<int64_t> wrong = Connect("guess")->Push(HeaderOf(0, 1, "x"), Shared("x"), NoPause);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated) << wrong.status();
  EXPECT_EQ(Connect("guess")->Fetch(0, 2, std::chrono::seconds(10)).status().code(), absl::StatusCode::kUnauthenticated);
  snapshot::SlotHeader h = HeaderOf(0, 1, "payload");
  absl::StatusOr<int64_t> corrupt = Connect()->Push(h, Shared("pAyload"), NoPause);
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss) << corrupt.status();
  EXPECT_NE(corrupt.status().message().find("checksum"), std::string::npos) << corrupt.status();
  EXPECT_TRUE(keeper_->Copies(0, 2).empty());
}

TEST_F(ReplicaGrpcTest, ABuddyThatIsGoneIsAnErrorWithinTheTimeout) {
  const int port = server_->port();
  server_.reset();
  std::unique_ptr<BuddyChannel> buddy = ConnectBuddy("127.0.0.1", port, job_, kJob, 64 << 20);
  absl::StatusOr<std::vector<Copy>> copies = buddy->Fetch(0, 2, std::chrono::seconds(2));
  EXPECT_FALSE(copies.ok());
  EXPECT_NE(copies.status().message().find("buddy 127.0.0.1"), std::string::npos) << copies.status();
}

TEST_F(ReplicaGrpcTest, WithTlsOnlyBuddiesOfTheJobsCaTalkWhateverAddressTheirCertificatesName) {
  const std::string dir = testing::MakeTempDir();
  // One certificate for every node, naming another address (as a job certificate may name only
  // the rendezvous host): buddies check the chain, not the name.
  const testing::TlsFiles job_files = testing::MakeTlsFiles(dir, "job", "IP:10.9.9.9");
  const testing::TlsFiles stranger = testing::MakeTlsFiles(dir, "stranger");
  if (!job_files.ok() || !stranger.ok()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  rdzv::ClientOptions tls_job = job_;
  tls_job.tls = job_files.Credentials();
  Serve(tls_job);
  std::unique_ptr<BuddyChannel> buddy = Connect("secret", tls_job.tls);
  absl::StatusOr<int64_t> kept = buddy->Push(HeaderOf(1, 3, "over tls"), Shared("over tls"), NoPause);
  ASSERT_TRUE(kept.ok()) << kept.status();
  absl::StatusOr<std::vector<Copy>> copies = buddy->Fetch(1, 2, std::chrono::seconds(10));
  ASSERT_TRUE(copies.ok()) << copies.status();
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].payload, "over tls");

  // A certificate from another CA, and no certificate at all, get nothing and leave nothing.
  EXPECT_THAT(Connect("secret", stranger.Credentials())->Fetch(1, 2, std::chrono::seconds(10)),
              ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(Connect("secret", stranger.Credentials())->Push(HeaderOf(0, 1, "x"), Shared("x"), NoPause),
              ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT(Connect("secret")->Push(HeaderOf(0, 2, "x"), Shared("x"), NoPause),
              ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_TRUE(keeper_->Copies(0, 2).empty());
}

// As on the node that hosts the rendezvous: the service runs on loopback, the store on the declared
// port relays gRPC connections to it, and the Replica service beside it keeps that node's copies.
TEST_F(ReplicaGrpcTest, TheRendezvousHostKeepsCopiesReceivedThroughTheDeclaredPort) {
  rdzv::RendezvousOptions options;
  options.run_id = job_.run_id;
  options.token = job_.token;
  auto keeper = std::make_shared<ReplicaKeeper>(kJob, 64 << 20, 4);
  absl::StatusOr<std::unique_ptr<rdzv::RendezvousServer>> rendezvous =
      rdzv::RendezvousServer::Start("127.0.0.1", 0, options, {}, NewReplicaService(job_, keeper));
  ASSERT_TRUE(rendezvous.ok()) << rendezvous.status();
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> declared =
      TcpStoreServer::Start("127.0.0.1", 0, static_cast<uint16_t>((*rendezvous)->port()));
  ASSERT_TRUE(declared.ok()) << declared.status();
  const int port = (*declared)->port();

  std::string payload(2 * kChunkBytes + 7, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 13);
  std::unique_ptr<BuddyChannel> buddy = ConnectBuddy("127.0.0.1", port, job_, kJob, 64 << 20);
  absl::StatusOr<int64_t> kept = buddy->Push(HeaderOf(1, 9, payload), Shared(payload), NoPause);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, 9);
  ASSERT_EQ(keeper->Copies(1, 2).size(), 1u);
  absl::StatusOr<std::vector<Copy>> copies = buddy->Fetch(1, 2, std::chrono::seconds(10));
  ASSERT_TRUE(copies.ok()) << copies.status();
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].payload, payload);
  EXPECT_EQ(ConnectBuddy("127.0.0.1", port, rdzv::ClientOptions{"", "job", "guess", {}}, kJob, 64 << 20)
                ->Fetch(1, 2, std::chrono::seconds(10))
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);

  // The rendezvous still answers on the same port.
  absl::StatusOr<std::unique_ptr<rdzv::RendezvousClient>> client =
      rdzv::RendezvousClient::Create(rdzv::ClientOptions{"127.0.0.1:" + std::to_string(port), "job", "secret", {}});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Status().ok());
}

TEST_F(ReplicaGrpcTest, APortThatIsTakenIsRefusedForTheCallerToTakeAnother) {
  absl::StatusOr<std::unique_ptr<ReplicaServer>> second =
      StartReplicaServer("127.0.0.1", server_->port(), job_, std::make_shared<ReplicaKeeper>(kJob, 64 << 20, 4));
  EXPECT_THAT(second, ::dtrun::testing::StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("in use")));
  // The first still serves.
  EXPECT_TRUE(Connect()->Push(HeaderOf(0, 1, "x"), Shared("x"), NoPause).ok());
}

}  // namespace
}  // namespace dtrun::replica

// `dtrun rdzv-server` on a dedicated "host" (loopback here), elastic agents joining it, remote
// `dtrun kill --endpoint`, and TLS between agents and service.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/tls_files.h"

namespace dtrun::testing {
namespace {

constexpr char kProgram[] = "echo READY $RANK world=$WORLD_SIZE store=$MASTER_ADDR:$MASTER_PORT; exec sleep 300";

std::unique_ptr<Harness> Agent(int port, std::vector<std::string> extra = {}, const char* program = kProgram) {
  std::vector<std::string> argv = {DtrunBinary(), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "rs",
                                   "--rdzv-token", "t", "--local-addr", "127.0.0.1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const char* a : {"/bin/sh", "-c", program}) argv.push_back(a);
  return std::make_unique<Harness>(argv);
}

// The port a dedicated server bound (it was given port 0), read from its "serving run ID on
// HOST:PORT" line; -1 if it did not say.
int ServingPort(Harness& server) {
  if (!server.WaitForOutput("serving run ")) return -1;
  const std::string out = server.out();
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("serving run \\S+ on \\S+:(\\d+)"))) return -1;
  return std::stoi(m[1]);
}

// A port nothing listens on now, from the kernel: for the agent-hosted service, which needs a
// fixed one on every node's command line.
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

TEST(RdzvServerTest, DedicatedServiceFormsTheJobAndRemoteKillStopsEveryNode) {
  Harness server({DtrunBinary(), "rdzv-server", "--rdzv-endpoint", "127.0.0.1:0", "--nnodes", "2", "--rdzv-id", "rs",
                  "--rdzv-token", "t"});
  const int port = ServingPort(server);
  ASSERT_GT(port, 0) << server.all();
  auto a = Agent(port), b = Agent(port);
  ASSERT_TRUE(a->WaitForOutput("world=2")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("world=2")) << b->all();
  // The workers' store is the server's endpoint, as under torchrun, not a node's.
  const std::string store = "store=127.0.0.1:" + std::to_string(port);
  EXPECT_NE(a->out().find(store), std::string::npos) << a->all();
  EXPECT_NE(b->out().find(store), std::string::npos) << b->all();
  auto [src, status] = RunToEnd({DtrunBinary(), "status", "--endpoint", "127.0.0.1:" + std::to_string(port),
                                 "--run-id", "rs", "--rdzv-token", "t"});
  EXPECT_EQ(src, 0) << status;
  EXPECT_NE(status.find("run rs: running, round 0, 0 restart(s) used, 2 node(s)"), std::string::npos) << status;
  auto [rc, out] = RunToEnd({DtrunBinary(), "kill", "--endpoint", "127.0.0.1:" + std::to_string(port), "--run-id",
                             "rs", "--rdzv-token", "t"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(a->Wait(), 128 + SIGTERM) << a->all();
  EXPECT_EQ(b->Wait(), 128 + SIGTERM) << b->all();
  EXPECT_NE(a->err().find("the job was killed"), std::string::npos) << a->all();
  EXPECT_EQ(server.Wait(std::chrono::seconds(30)), 0) << server.all();  // job over, nodes gone
}

TEST(RdzvServerTest, ATakenEndpointIsNamedWithTheFix) {
  Harness first({DtrunBinary(), "rdzv-server", "--rdzv-endpoint", "127.0.0.1:0", "--nnodes", "2", "--rdzv-id", "rs"});
  const int port = ServingPort(first);
  ASSERT_GT(port, 0) << first.all();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  auto [rc, out] = RunToEnd({DtrunBinary(), "rdzv-server", "--rdzv-endpoint", endpoint, "--nnodes", "2"});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("dtrun rdzv-server: error: --rdzv-endpoint " + endpoint +
                     ": the port is taken (another service or job holds it); choose another port"),
            std::string::npos)
      << out;
  ::kill(first.pid(), SIGTERM);
  EXPECT_EQ(first.Wait(), 0) << first.all();
}

// A dedicated service SIGKILLed and started again on its port (by systemd, say) within the agents'
// lease: they join the new instance, which runs round 1, not a round 0 their workers already ran.
TEST(RdzvServerTest, ADedicatedServiceStartedAgainWithinTheLeaseGetsItsNodesBack) {
  const int port = UnusedPort();
  ASSERT_GT(port, 0);
  const std::vector<std::string> serve = {
      DtrunBinary(),  "rdzv-server", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port),
      "--nnodes",     "2",           "--rdzv-id",       "rs",
      "--rdzv-token", "t",           "--rdzv-conf",     "keep_alive_interval=0.5,keep_alive_max_attempt=20"};
  auto server = std::make_unique<Harness>(serve);
  ASSERT_EQ(ServingPort(*server), port) << server->all();
  constexpr char kSaysRound[] = "echo READY $RANK round=$TORCHELASTIC_RESTART_COUNT; exec sleep 300";
  auto a = Agent(port, {}, kSaysRound), b = Agent(port, {}, kSaysRound);
  ASSERT_TRUE(a->WaitForOutput("round=0")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("round=0")) << b->all();
  ::kill(server->pid(), SIGKILL);
  ASSERT_TRUE(server->Wait(std::chrono::seconds(10)).has_value());
  server = std::make_unique<Harness>(serve);
  ASSERT_EQ(ServingPort(*server), port) << server->all();
  EXPECT_TRUE(a->WaitForOutput("round=1", std::chrono::seconds(30))) << a->all() << server->all();
  EXPECT_TRUE(b->WaitForOutput("round=1", std::chrono::seconds(30))) << b->all() << server->all();
  EXPECT_NE(a->err().find("does not know this node (it declared it lost, or it was started again)"), std::string::npos)
      << a->all();
  ::kill(a->pid(), SIGTERM);
  ::kill(b->pid(), SIGTERM);
  EXPECT_EQ(a->Wait(), 128 + SIGTERM) << a->all();
  EXPECT_EQ(b->Wait(), 128 + SIGTERM) << b->all();
}

// The TLS flags of a CA of its own and a certificate for 127.0.0.1 signed by it (files
// `<name>-ca.pem`, `<name>.pem`, `<name>.key` in `dir`); empty if openssl is missing or failed.
std::vector<std::string> MakeTlsFlags(const std::string& dir = MakeTempDir(), const std::string& name = "node") {
  return MakeTlsFiles(dir, name).Flags();
}

TEST(RdzvServerTest, TlsAgentsJoinAndPlaintextAgentsCannot) {
  std::vector<std::string> tls = MakeTlsFlags();
  if (tls.empty()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  std::vector<std::string> server_argv = {DtrunBinary(), "rdzv-server", "--rdzv-endpoint", "127.0.0.1:0", "--nnodes",
                                          "2", "--rdzv-id", "rs", "--rdzv-token", "t"};
  server_argv.insert(server_argv.end(), tls.begin(), tls.end());
  Harness server(server_argv);
  const int port = ServingPort(server);
  ASSERT_GT(port, 0) << server.all();
  auto plain = Agent(port, {"--rdzv-conf", "join_timeout=1"});
  EXPECT_EQ(plain->Wait(), 1) << plain->all();
  auto a = Agent(port, tls), b = Agent(port, tls);
  ASSERT_TRUE(a->WaitForOutput("world=2")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("world=2")) << b->all();
  ::kill(a->pid(), SIGTERM);
  ::kill(b->pid(), SIGTERM);
  EXPECT_EQ(a->Wait(), 128 + SIGTERM);
  EXPECT_EQ(b->Wait(), 128 + SIGTERM);
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(server.Wait(), 0);
}

TEST(RdzvServerTest, AgentHostedTlsServiceSharesTheWorkersStorePort) {
  std::vector<std::string> tls = MakeTlsFlags();
  if (tls.empty()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  // No dedicated server: the first agent binds the endpoint and serves TLS gRPC and the workers'
  // TCPStore on that one port.
  const int port = UnusedPort();
  std::vector<std::string> argv = {DtrunBinary(), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "tl",
                                   "--rdzv-token", "t", "--local-addr", "127.0.0.1"};
  argv.insert(argv.end(), tls.begin(), tls.end());
  for (const char* a : {"/bin/sh", "-c", "echo RANK $RANK at $MASTER_ADDR:$MASTER_PORT"}) argv.push_back(a);
  Harness a(argv), b(argv);
  EXPECT_EQ(a.Wait(), 0) << a.all();
  EXPECT_EQ(b.Wait(), 0) << b.all();
  const std::string at = " at 127.0.0.1:" + std::to_string(port);
  EXPECT_NE((a.out() + b.out()).find("RANK 0" + at), std::string::npos) << a.all() << b.all();
  EXPECT_NE((a.out() + b.out()).find("RANK 1" + at), std::string::npos) << a.all() << b.all();
}

}  // namespace
}  // namespace dtrun::testing

namespace dtrun::testing {
namespace {

// Every command that talks to a rendezvous takes the same TLS flags and checks them the same way
// before connecting: a partial set, a file that is not PEM, a key of another certificate, a
// certificate of another CA.
TEST(RdzvServerTest, TlsFlagMistakesAreNamedAtStartByEveryCommand) {
  const std::string dir = MakeTempDir();
  std::vector<std::string> a = MakeTlsFlags(dir, "a"), b = MakeTlsFlags(dir, "b");
  if (a.empty() || b.empty()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  ASSERT_EQ(RunToEnd({"/bin/sh", "-c", "echo garbage > " + dir + "/garbage.pem"}).first, 0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> mistakes = {
      {{"--rdzv-tls-ca", a[5]}, "missing --rdzv-tls-cert, --rdzv-tls-key"},
      {{"--rdzv-tls-cert", dir + "/garbage.pem", "--rdzv-tls-key", a[3], "--rdzv-tls-ca", a[5]},
       "is not a PEM certificate"},
      {{"--rdzv-tls-cert", a[1], "--rdzv-tls-key", b[3], "--rdzv-tls-ca", a[5]}, "does not belong to --rdzv-tls-cert"},
      {{"--rdzv-tls-cert", b[1], "--rdzv-tls-key", b[3], "--rdzv-tls-ca", a[5]}, "does not verify against --rdzv-tls-ca"},
      {{"--rdzv-tls-cert", dir + "/missing.pem", "--rdzv-tls-key", a[3], "--rdzv-tls-ca", a[5]}, "cannot open"},
  };
  const std::string ep = "127.0.0.1:" + std::to_string(UnusedPort());
  const std::vector<std::vector<std::string>> commands = {
      {DtrunBinary(), "rdzv-server", "--rdzv-endpoint", ep, "--nnodes", "2"},
      {DtrunBinary(), "status", "--endpoint", ep},
      {DtrunBinary(), "kill", "--endpoint", ep},
      {DtrunBinary(), "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", ep, "--local-addr", "127.0.0.1"},
  };
  for (const auto& [flags, expected] : mistakes) {
    for (std::vector<std::string> argv : commands) {
      argv.insert(argv.end(), flags.begin(), flags.end());
      if (argv[1] == "--nnodes") argv.push_back("/bin/true");
      auto [rc, out] = RunToEnd(argv);
      EXPECT_EQ(rc, 2) << argv[1] << " " << expected << ": " << out;
      EXPECT_NE(out.find(expected), std::string::npos) << argv[1] << ": " << out;
    }
  }
}

// A node with a certificate of another CA, and a plaintext node: both sides say why at the first
// connect, long before the join timeout.
TEST(RdzvServerTest, AFailedHandshakeIsNamedAtTheFirstConnectOnBothSides) {
  const std::string dir = MakeTempDir();
  std::vector<std::string> a = MakeTlsFlags(dir, "a"), b = MakeTlsFlags(dir, "b");
  if (a.empty() || b.empty()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  std::vector<std::string> server_argv = {DtrunBinary(), "rdzv-server", "--rdzv-endpoint", "127.0.0.1:0", "--nnodes",
                                          "2", "--rdzv-id", "rs"};
  server_argv.insert(server_argv.end(), a.begin(), a.end());
  Harness server(server_argv);
  const int port = ServingPort(server);
  ASSERT_GT(port, 0) << server.all();
  auto other_ca = Agent(port, b);
  EXPECT_TRUE(other_ca->WaitForOutput("not trust this node's certificate", std::chrono::seconds(30))) << other_ca->all();
  EXPECT_NE(other_ca->err().find("certificate verify failed"), std::string::npos) << other_ca->all();
  EXPECT_TRUE(server.WaitForOutput("TLS handshake failed", std::chrono::seconds(30))) << server.all();
  ::kill(other_ca->pid(), SIGTERM);
  EXPECT_EQ(other_ca->Wait(), 128 + SIGTERM) << other_ca->all();
  auto plain = Agent(port);
  EXPECT_TRUE(plain->WaitForOutput("give this side --rdzv-tls-cert", std::chrono::seconds(30))) << plain->all();
  ::kill(plain->pid(), SIGTERM);
  EXPECT_EQ(plain->Wait(), 128 + SIGTERM) << plain->all();
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.all();
}

}  // namespace
}  // namespace dtrun::testing

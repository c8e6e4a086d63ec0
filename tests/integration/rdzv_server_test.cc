// `dtrun rdzv-server` on a dedicated "host" (loopback here), elastic agents joining it, remote
// `dtrun kill --endpoint`, and TLS between agents and service.
#include <signal.h>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

constexpr char kProgram[] = "echo READY $RANK world=$WORLD_SIZE; exec sleep 300";

std::unique_ptr<Harness> Agent(int port, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {DtrunBinary(), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "rs",
                                   "--rdzv-token", "t", "--local-addr", "127.0.0.1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const char* a : {"/bin/sh", "-c", kProgram}) argv.push_back(a);
  return std::make_unique<Harness>(argv);
}

int FreePortGuess() { return 20000 + ::getpid() % 20000; }

TEST(RdzvServerTest, DedicatedServiceFormsTheJobAndRemoteKillStopsEveryNode) {
  const int port = FreePortGuess();
  Harness server({DtrunBinary(), "rdzv-server", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--nnodes",
                  "2", "--rdzv-id", "rs", "--rdzv-token", "t"});
  ASSERT_TRUE(server.WaitForOutput("serving run rs")) << server.all();
  auto a = Agent(port), b = Agent(port);
  ASSERT_TRUE(a->WaitForOutput("world=2")) << a->all();
  ASSERT_TRUE(b->WaitForOutput("world=2")) << b->all();
  auto [src, status] = RunToEnd({DtrunBinary(), "status", "--endpoint", "127.0.0.1:" + std::to_string(port),
                                 "--run-id", "rs", "--rdzv-token", "t"});
  EXPECT_EQ(src, 0) << status;
  EXPECT_NE(status.find("run rs: RUNNING, round 0, 0 restart(s) used, 2 node(s)"), std::string::npos) << status;
  auto [rc, out] = RunToEnd({DtrunBinary(), "kill", "--endpoint", "127.0.0.1:" + std::to_string(port), "--run-id",
                             "rs", "--rdzv-token", "t"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(a->Wait(), 128 + SIGTERM) << a->all();
  EXPECT_EQ(b->Wait(), 128 + SIGTERM) << b->all();
  EXPECT_NE(a->err().find("the job was killed"), std::string::npos) << a->all();
  EXPECT_EQ(server.Wait(std::chrono::seconds(30)), 0) << server.all();  // job over, nodes gone
}

// A CA and a node certificate for 127.0.0.1, and the TLS flags that use them; empty if openssl
// is missing or failed.
std::vector<std::string> MakeTlsFlags() {
  std::string dir = MakeTempDir();
  auto openssl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    return RunToEnd(args).first == 0;
  };
  bool ok = openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/ca.key", "-out",
                     dir + "/ca.pem", "-days", "1", "-subj", "/CN=dtrun-test-ca"}) &&
            openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/node.key", "-out", dir + "/node.csr",
                     "-subj", "/CN=node", "-addext", "subjectAltName=IP:127.0.0.1"}) &&
            openssl({"x509", "-req", "-in", dir + "/node.csr", "-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key",
                     "-CAcreateserial", "-out", dir + "/node.pem", "-days", "1", "-copy_extensions", "copy"});
  if (!ok) return {};
  return {"--rdzv-tls-cert", dir + "/node.pem", "--rdzv-tls-key", dir + "/node.key", "--rdzv-tls-ca", dir + "/ca.pem"};
}

TEST(RdzvServerTest, TlsAgentsJoinAndPlaintextAgentsCannot) {
  std::vector<std::string> tls = MakeTlsFlags();
  if (tls.empty()) GTEST_SKIP() << "openssl is not installed (or could not make test certificates)";
  const int port = FreePortGuess() + 1;
  std::vector<std::string> server_argv = {DtrunBinary(), "rdzv-server", "--rdzv-endpoint",
                                          "127.0.0.1:" + std::to_string(port), "--nnodes", "2", "--rdzv-id", "rs",
                                          "--rdzv-token", "t"};
  server_argv.insert(server_argv.end(), tls.begin(), tls.end());
  Harness server(server_argv);
  ASSERT_TRUE(server.WaitForOutput("serving run rs")) << server.all();
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
  const int port = FreePortGuess() + 2;
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

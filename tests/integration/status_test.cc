// The live view of a running job: `dtrun status` (table and JSON), the metrics endpoint, and the
// progress line on a terminal, with real workers reporting through the `dtrun` Python module.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/loopback.h"
#include "tests/support/poll.h"
#include "tests/support/process_harness.h"
#include "tests/support/pty_session.h"
#include "tests/support/status_probe.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;

// Every job `dtrun status --json ARGS` prints (one document per line).
std::vector<nlohmann::json> StatusJson(const std::map<std::string, std::string>& env, std::vector<std::string> args = {}) {
  std::vector<std::string> argv = {DtrunBinary(), "status", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto [rc, out] = RunToEnd(argv, env);
  EXPECT_EQ(rc, 0) << out;
  return ParseJsonLines(out);
}

std::string HttpGet(int port, const std::string& request) {
  UniqueFd s = ConnectLoopback(port);
  if (!s.valid()) return "connect failed";
  timeval tv{10, 0};  // a bound on the reads below
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  WriteAll(s.get(), request.data(), request.size());
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(s.get(), buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

class StatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> py = TorchPython();
    if (!py) GTEST_SKIP() << "no /usr/bin/python3 for the workers (set PYTHON_EXEC)";
    env_ = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", *py}};
  }
  std::map<std::string, std::string> env_;
};

TEST_F(StatusTest, JsonShowsEveryRankWithAdvancingStepsAndTheTableShowsTheJob) {
  Harness job({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "watched",
               Worker("report_steps.py")}, env_);
  ASSERT_TRUE(job.WaitForOutput("STEPPING 1")) << job.all();
  ASSERT_TRUE(job.WaitForOutput("STEPPING 0")) << job.all();
  auto ask = [&] { return StatusJson(env_, {"--run-id", "watched"}); };
  nlohmann::json first = AwaitStepsPast(ask, {}, 2);
  ASSERT_EQ(StepsByRank(first).size(), 2u) << first.dump();
  nlohmann::json later = AwaitStepsPast(ask, StepsByRank(first), 2);
  std::map<int, int64_t> before = StepsByRank(first), after = StepsByRank(later);
  for (int rank : {0, 1}) EXPECT_GT(after[rank], before[rank]) << later.dump();
  EXPECT_EQ(later["schema"], "dtrun.status/v1");
  EXPECT_EQ(later["run_id"], "watched");
  EXPECT_EQ(later["phase"], "running");
  const nlohmann::json& rank0 = later["nodes"][0]["ranks"][0];
  EXPECT_EQ(rank0["state"], "running");
  EXPECT_GT(rank0["pid"].get<int64_t>(), 0);
  EXPECT_GT(rank0["rss_bytes"].get<int64_t>(), 1 << 20);
  EXPECT_TRUE(rank0["gpu_util_percent"].is_null());  // no NVML here
  EXPECT_LT(rank0["heartbeat_age_s"].get<double>(), 10.0);

  auto [rc, table] = RunToEnd({DtrunBinary(), "status"}, env_);
  EXPECT_EQ(rc, 0) << table;
  EXPECT_NE(table.find("run watched: running, round 0, 0 restart(s) used, 1 node(s), 2 rank(s), step "), std::string::npos)
      << table;
  EXPECT_NE(table.find("SAMPLES/S"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 6) << table;  // header, launch, columns, 2 ranks, gap
  Harness watch({DtrunBinary(), "status", "--watch", "--json", "--interval", "0.2", "--run-id", "watched"}, env_);
  ASSERT_TRUE(watch.WaitForOutput("\"run_id\":\"watched\"")) << watch.all();
  ::kill(job.pid(), SIGTERM);
  EXPECT_TRUE(job.Wait(seconds(30)).has_value());
  EXPECT_EQ(watch.Wait(seconds(30)), 0) << watch.all();  // --watch ends with the job
}

TEST_F(StatusTest, NoJobUnknownRunIdAndBadFlagsAreSaidInOneLine) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "status"}, env_);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "no dtrun jobs running\n");
  auto [rc2, out2] = RunToEnd({DtrunBinary(), "status", "--run-id", "nope"}, env_);
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(out2, "no dtrun job with run id nope on this machine\n");
  EXPECT_TRUE(StatusJson(env_).empty());
  auto [rc3, out3] = RunToEnd({DtrunBinary(), "status", "--watch", "--interval", "0"}, env_);
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(out3.find("--interval 0: expected seconds between 0.1 and 3600"), std::string::npos) << out3;
}

TEST_F(StatusTest, MetricsEndpointServesPrometheusAndStatusAndShrugsOffHostileClients) {
  Harness job({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "scraped", "--metrics-host",
               "127.0.0.1", "--metrics-port", "0", Worker("report_steps.py"), "250"}, env_);
  ASSERT_TRUE(job.WaitForOutput("STEPPING 0")) << job.all();
  std::smatch m;
  const std::string all = job.all();
  ASSERT_TRUE(std::regex_search(all, m, std::regex("serving metrics on http://127\\.0\\.0\\.1:([0-9]+)/metrics"))) << all;
  const int port = std::stoi(m[1]);
  // Idle connections, a header that never ends, and garbage: the endpoint keeps answering.
  std::vector<UniqueFd> hostile;
  for (int i = 0; i < 8; ++i) {
    UniqueFd s = ConnectLoopback(port);
    ASSERT_TRUE(s.valid());
    const std::string junk = i % 2 ? std::string("GET /metrics HTTP/1.1\r\nX: ") + std::string(4000, 'a') : "\x01\x02\xff\r\n\r\n";
    WriteAll(s.get(), junk.data(), junk.size());
    hostile.push_back(std::move(s));
  }
  std::string metrics;
  PollUntil(
      [&] {
        metrics = HttpGet(port, "GET /metrics HTTP/1.0\r\n\r\n");
        return metrics.find("dtrun_step{run_id=\"scraped\"") != std::string::npos;
      },
      seconds(30));
  EXPECT_NE(metrics.find(" 200 OK\r\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("text/plain; version=0.0.4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("# TYPE dtrun_restarts_total counter"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(",rank=\"1\",local_rank=\"1\"} "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("dtrun_workers{run_id=\"scraped\","), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("dtrun_total_steps{run_id=\"scraped\""), std::string::npos) << metrics;
  std::string status = HttpGet(port, "GET /status HTTP/1.0\r\n\r\n");
  EXPECT_NE(status.find("\"schema\":\"dtrun.status/v1\""), std::string::npos) << status;
  EXPECT_NE(HttpGet(port, "GET /other HTTP/1.0\r\n\r\n").find(" 404 "), std::string::npos);
  EXPECT_NE(HttpGet(port, "DELETE /metrics HTTP/1.0\r\n\r\n").find(" 405 "), std::string::npos);
  EXPECT_EQ(job.Wait(seconds(60)), 0) << job.all();  // the job itself is undisturbed
  EXPECT_NE(job.out().find("DONE 1"), std::string::npos) << job.all();
}

TEST_F(StatusTest, AMetricsPortThatIsTakenIsSaidAndTheJobRunsWithoutIt) {
  int taken_port = 0;
  UniqueFd taken = ListenOnFreeLoopbackPort(taken_port);
  ASSERT_TRUE(taken.valid());
  const std::string port = std::to_string(taken_port);
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--metrics-host", "127.0.0.1", "--metrics-port", port,
                             Worker("report_steps.py"), "5"}, env_);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--metrics-port " + port + ": cannot listen on 127.0.0.1:" + port), std::string::npos) << out;
  EXPECT_NE(out.find("the job runs without a metrics endpoint"), std::string::npos) << out;
  auto [rc2, out2] = RunToEnd({DtrunBinary(), "--standalone", "--metrics-port", "70000", "/bin/true"}, env_);
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("--metrics-port 70000: expected a port"), std::string::npos) << out2;
  auto [rc3, out3] = RunToEnd({DtrunBinary(), "--standalone", "--metrics-host", "example.com", "--metrics-port", "0", "/bin/true"}, env_);
  EXPECT_EQ(rc3, 2);
  EXPECT_NE(out3.find("--metrics-host example.com: expected a numeric IPv4 or IPv6 address"), std::string::npos) << out3;
}

// On a terminal: one line below the workers' output, erased before each of their lines and at the
// end, so no worker line ever starts after it.
TEST_F(StatusTest, TheProgressLineStaysBelowWorkerLinesOnATerminal) {
  PtySession term({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("report_steps.py"), "150", "25"}, env_);
  ASSERT_TRUE(term.started());
  ASSERT_EQ(term.Wait(seconds(60)), 0) << term.output();
  const std::string& out = term.output();
  EXPECT_NE(out.find("[dtrun] step "), std::string::npos) << out;
  EXPECT_NE(out.find("/150"), std::string::npos) << out;
  EXPECT_NE(out.find(" samples/s"), std::string::npos) << out;
  for (size_t at = out.find("[default"); at != std::string::npos; at = out.find("[default", at + 1)) {
    const bool line_start = at == 0 || out[at - 1] == '\n' || out.compare(at - 4, 4, "\r\033[K") == 0;
    EXPECT_TRUE(line_start) << "a worker line does not start a line at " << at << ": " << out.substr(at - 40, 80);
  }
  const size_t last = out.rfind("[dtrun] step ");
  EXPECT_NE(out.find("\r\033[K", last), std::string::npos) << "the line was not erased at the end";

  PtySession plain({DtrunBinary(), "--standalone", "--no-progress-line", Worker("report_steps.py"), "60"}, env_);
  ASSERT_EQ(plain.Wait(seconds(60)), 0) << plain.output();
  EXPECT_EQ(plain.output().find("[dtrun] step "), std::string::npos) << plain.output();
}

}  // namespace
}  // namespace dtrun::testing

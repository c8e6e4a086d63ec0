// Rendezvous load generator: N simulated agents against a running `dtrun rdzv-server`, each with
// its own gRPC channel and TCP connection, spread over several processes so that on a small
// machine the generator is not what is measured. Each agent is what GrpcRoundSource is to the
// service: a Join, a Watch long-poll held at all times, and keep-alives at the service's interval
// (with a node's status rows when --status-rows). The phases, each timed from its first request
// until every agent it concerns holds an assignment of the expected size:
//   formation  N agents join at once;
//   steady     keep-alives for --steady-seconds (and, with --status-rows, a whole-job status query
//              once a second);
//   restart    one agent reports a worker failure; every agent learns of the new round;
//   late join  --late more agents join the running job (the server needs --nnodes N:N+late);
//   leave      those agents leave again.
// With --server-pid, the service's CPU time (from /proc) is reported per phase, and its peak RSS.
// One line per phase, `phase=NAME key=value ...`, for bench/rdzv_scale.py.
//   rdzv_load --endpoint HOST:PORT --nodes N [--procs 4] [--run-id load] [--token t]
//             [--steady-seconds 0] [--status-rows] [--keep-alive-ms 5000] [--late 0] [--server-pid PID]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/mutex_mode.h"
#include "base/process_table.h"
#include "rendezvous/rendezvous_client.h"

namespace {

using dtrun::rdzv::ClientOptions;
using dtrun::rdzv::JobPhase;
using dtrun::rdzv::RendezvousClient;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: comparable across the processes

constexpr int kWorkersPerNode = 8;

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

struct Flags {
  std::string endpoint;
  int nodes = 0;
  int procs = 4;
  std::string run_id = "load";
  std::string token = "t";
  int steady_seconds = 0;
  bool status_rows = false;
  int late = 0;
  int server_pid = 0;
  int keep_alive_ms = 5000;  // the service's default keep_alive_interval, which it hands out on Join
};

// ---- one agent -------------------------------------------------------------------------------

// One agent's status rows, as the agent's BuildNodeStatus fills them.
dtrun::status::NodeStatus Rows(int64_t step) {
  dtrun::status::NodeStatus node;
  node.time_unix_ms = 1;
  node.total_steps = 100000;
  for (int lr = 0; lr < kWorkersPerNode; ++lr) {
    dtrun::status::RankStatus r;
    r.global_rank = lr;
    r.local_rank = lr;
    r.pid = 100000 + lr;
    r.state = "running";
    r.step = step;
    r.steps_per_s = 3.1;
    r.samples_per_s = 812.5;
    r.section = "step";
    r.cpu_percent = 99;
    r.rss_bytes = int64_t{6} << 30;
    node.ranks.push_back(r);
  }
  return node;
}

class Agent {
 public:
  Agent(const ClientOptions& o, std::string host) : client_(RendezvousClient::Create(o).value()), host_(std::move(host)) {}
  ~Agent() {
    client_->CancelAll();
    if (watcher_.joinable()) watcher_.join();
  }

  void Start() {
    active_ = true;
    watcher_ = std::thread([this] { JoinAndWatch(); });
  }
  void Leave() {
    (void)client_->Leave(NodeId());
    client_->CancelAll();
    if (watcher_.joinable()) watcher_.join();
    active_ = false;
  }
  bool active() const { return active_; }
  bool failed() const { return failed_; }

  // When this agent first held an assignment of `world` nodes in a round >= `min_round` (0: not yet).
  int64_t HeldAt(int world, int64_t min_round) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Seen& s : seen_) {
      if (s.world == world && s.round >= min_round) return s.at_ns;
    }
    return 0;
  }
  int64_t round() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.empty() ? -1 : seen_.back().round;
  }
  std::string NodeId() {
    std::lock_guard<std::mutex> lock(mu_);
    return node_id_;
  }
  RendezvousClient& client() { return *client_; }

 private:
  struct Seen {
    int64_t round;
    int world;
    int64_t at_ns;
  };

  void JoinAndWatch() {
    dtrun::rdzv::NodeInfo node{host_, kWorkersPerNode, "127.0.0.1", 1, -1, "", 0};
    auto join = client_->Join(node, Clock::now() + std::chrono::seconds(120));
    if (!join.ok()) {
      failed_ = true;
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      node_id_ = join->node_id;
    }
    uint64_t after = 0;
    for (;;) {
      auto view = client_->Watch(join->node_id, after, std::chrono::seconds(30));
      if (!view.ok()) {
        if (view.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
        return;  // left, cancelled or lost
      }
      after = view->version;
      if (view->phase == JobPhase::kRunning && view->assignment) {
        std::lock_guard<std::mutex> lock(mu_);
        if (seen_.empty() || seen_.back().round != view->round) {
          seen_.push_back(Seen{view->round, view->assignment->group_world_size, NowNs()});
        }
      }
      if (view->phase != JobPhase::kForming && view->phase != JobPhase::kRunning) return;
    }
  }

  std::unique_ptr<RendezvousClient> client_;
  const std::string host_;
  std::thread watcher_;
  std::atomic<bool> active_{false};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::string node_id_;
  std::vector<Seen> seen_;
};

// ---- a child process: a share of the agents, driven by commands on stdin --------------------

// Keep-alives for every active agent, spread evenly over the interval, as each agent's own
// keep-alive thread would send them.
class KeepAlives {
 public:
  KeepAlives(std::vector<std::unique_ptr<Agent>>& agents, std::chrono::milliseconds interval, bool rows)
      : agents_(agents), interval_(interval), rows_(rows), thread_([this] { Run(); }) {}
  ~KeepAlives() {
    stop_ = true;
    thread_.join();
  }
  int64_t sent() const { return sent_; }
  int64_t failed() const { return failed_; }

 private:
  void Run() {
    const auto gap = std::chrono::duration_cast<std::chrono::microseconds>(interval_) / std::max<size_t>(agents_.size(), 1);
    auto next = Clock::now();
    for (int64_t step = 0; !stop_; ++step) {
      for (auto& agent : agents_) {
        if (stop_) return;
        next += gap;
        std::this_thread::sleep_until(next);  // the agents' pace (benchmark load, not synchronisation)
        if (!agent->active()) continue;
        std::optional<dtrun::status::NodeStatus> rows;
        if (rows_) rows = Rows(step);
        absl::Status st = agent->client().KeepAlive(agent->NodeId(), std::chrono::seconds(10), rows ? &*rows : nullptr);
        (st.ok() ? sent_ : failed_)++;
      }
    }
  }

  std::vector<std::unique_ptr<Agent>>& agents_;
  const std::chrono::milliseconds interval_;
  const bool rows_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> sent_{0}, failed_{0};
  std::thread thread_;
};

// Commands, one per line; each is answered with one line:
//   start FIRST COUNT        agents [FIRST, FIRST+COUNT) join            -> ok
//   await WORLD MIN_ROUND    until every active agent holds such a round  -> ok LATEST_NS | timeout MISSING
//   keepalive MS ROWS        start keep-alives                            -> ok
//   fail                     the first active agent reports a failure     -> ok AT_NS ROUND
//   leave FIRST COUNT        those agents leave                           -> ok AT_NS
//   stop                     stop keep-alives                             -> ok SENT FAILED
int ChildMain(const Flags& f, int child, int count, FILE* in, FILE* out) {
  ClientOptions o;
  o.endpoint = f.endpoint;
  o.run_id = f.run_id;
  o.token = f.token;
  std::vector<std::unique_ptr<Agent>> agents;
  for (int i = 0; i < count; ++i) {
    agents.push_back(std::make_unique<Agent>(o, "load-" + std::to_string(child) + "-" + std::to_string(i)));
  }
  std::unique_ptr<KeepAlives> keep_alives;
  char line[256];
  while (std::fgets(line, sizeof line, in) != nullptr) {
    std::vector<std::string> w = absl::StrSplit(absl::StripAsciiWhitespace(line), ' ');
    int64_t a = 0, b = 0;
    if (w.size() > 1) (void)absl::SimpleAtoi(w[1], &a);
    if (w.size() > 2) (void)absl::SimpleAtoi(w[2], &b);
    if (w[0] == "start") {
      for (int64_t i = a; i < a + b && i < count; ++i) agents[i]->Start();
      std::fprintf(out, "ok\n");
    } else if (w[0] == "await") {
      const auto deadline = Clock::now() + std::chrono::seconds(120);
      int64_t latest = 0;
      int missing = 0;
      do {
        latest = 0;
        missing = 0;
        for (auto& agent : agents) {
          if (!agent->active()) continue;
          int64_t at = agent->HeldAt(static_cast<int>(a), b);
          if (at == 0) ++missing;
          latest = std::max(latest, at);
        }
        if (missing > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling a benchmark's own table
      } while (missing > 0 && Clock::now() < deadline);
      if (missing > 0) {
        std::fprintf(out, "timeout %d\n", missing);
      } else {
        std::fprintf(out, "ok %lld\n", static_cast<long long>(latest));
      }
    } else if (w[0] == "keepalive") {
      keep_alives = std::make_unique<KeepAlives>(agents, std::chrono::milliseconds(a), b != 0);
      std::fprintf(out, "ok\n");
    } else if (w[0] == "fail") {
      Agent& agent = *agents[0];
      dtrun::rdzv::FailureInfo failure;
      failure.global_rank = 0;
      failure.exit_code = 1;
      failure.message = "rdzv_load: a simulated worker failure";
      const int64_t round = agent.round();
      const int64_t at = NowNs();
      absl::Status st = agent.client().ReportOutcome(agent.NodeId(), round, /*success=*/false, {failure});
      std::fprintf(out, st.ok() ? "ok %lld %lld\n" : "error %lld %lld\n", static_cast<long long>(at),
                   static_cast<long long>(round));
    } else if (w[0] == "leave") {
      const int64_t at = NowNs();
      std::vector<std::thread> leaving;
      for (int64_t i = a; i < a + b && i < count; ++i) leaving.emplace_back([&, i] { agents[i]->Leave(); });
      for (auto& t : leaving) t.join();
      std::fprintf(out, "ok %lld\n", static_cast<long long>(at));
    } else if (w[0] == "stop") {
      const int64_t sent = keep_alives ? keep_alives->sent() : 0, failed = keep_alives ? keep_alives->failed() : 0;
      keep_alives.reset();
      std::fprintf(out, "ok %lld %lld\n", static_cast<long long>(sent), static_cast<long long>(failed));
    }
    std::fflush(out);
  }
  // stdin closed: the run is over.
  keep_alives.reset();
  int failed = 0;
  for (auto& agent : agents) failed += agent->failed();
  return failed == 0 ? 0 : 1;
}

// ---- the parent: forks the children first (gRPC does not survive fork), then drives them -----

struct Child {
  pid_t pid;
  FILE* to;
  FILE* from;
  int count;  // its agents that join first; the late ones follow them
  int late;
};

std::string Ask(Child& c, const std::string& command) {
  std::fprintf(c.to, "%s\n", command.c_str());
  std::fflush(c.to);
  char line[256] = {0};
  if (std::fgets(line, sizeof line, c.from) == nullptr) return "eof";
  return std::string(absl::StripAsciiWhitespace(line));
}

// Sends `command(child)` to every child at once, then collects the answers.
std::vector<std::string> AskAll(std::vector<Child>& children, const std::function<std::string(const Child&)>& command) {
  for (Child& c : children) {
    std::fprintf(c.to, "%s\n", command(c).c_str());
    std::fflush(c.to);
  }
  std::vector<std::string> answers;
  for (Child& c : children) {
    char line[256] = {0};
    answers.push_back(std::fgets(line, sizeof line, c.from) ? std::string(absl::StripAsciiWhitespace(line)) : "eof");
  }
  return answers;
}

// The latest time among "ok NS" answers; -1 if any child timed out.
int64_t Latest(const std::vector<std::string>& answers) {
  int64_t latest = 0;
  for (const std::string& a : answers) {
    std::vector<std::string> w = absl::StrSplit(a, ' ');
    int64_t ns = 0;
    if (w[0] != "ok" || w.size() < 2 || !absl::SimpleAtoi(w[1], &ns)) {
      std::fprintf(stderr, "rdzv_load: a child answered '%s'\n", a.c_str());
      return -1;
    }
    latest = std::max(latest, ns);
  }
  return latest;
}

struct ServerSample {
  double cpu_s = 0;
  int64_t hwm_bytes = 0;
};

ServerSample SampleServer(int pid) {
  ServerSample s;
  if (pid <= 0) return s;
  if (absl::StatusOr<dtrun::ProcessUsage> usage = dtrun::ReadProcessUsage(pid); usage.ok()) {
    s.cpu_s = double(usage->cpu_ticks) / ::sysconf(_SC_CLK_TCK);
  }
  // The peak, which ProcessUsage (the current RSS) does not carry.
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) s.hwm_bytes = std::atoll(line.c_str() + 6) * 1024;
  }
  return s;
}

void Report(const char* phase, int nodes, int64_t from_ns, int64_t to_ns, const ServerSample& before,
            const ServerSample& after, const std::string& extra = "") {
  std::printf("phase=%s nodes=%d ms=%.1f server_cpu_s=%.3f server_cpu_ms_per_node=%.3f%s%s\n", phase, nodes,
              to_ns < 0 ? -1.0 : (to_ns - from_ns) / 1e6, after.cpu_s - before.cpu_s,
              (after.cpu_s - before.cpu_s) * 1000 / nodes, extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

// Once a second, the whole job's status (`dtrun status --endpoint`), while the steady phase runs.
void AskStatus(const ClientOptions& o, int seconds) {
  auto client = RendezvousClient::Create(o).value();
  std::vector<double> ms;
  size_t rows = 0;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    auto s = client->Status();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    rows = 0;
    if (s.ok()) {
      for (const auto& node : s->progress) rows += node.ranks.size();
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the query pace
  }
  std::sort(ms.begin(), ms.end());
  std::printf("phase=status_queries queries=%zu rows=%zu query_ms_median=%.1f query_ms_max=%.1f\n", ms.size(), rows,
              ms.empty() ? 0 : ms[ms.size() / 2], ms.empty() ? 0 : ms.back());
}

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--endpoint") f.endpoint = value();
    else if (k == "--nodes") f.nodes = std::atoi(value().c_str());
    else if (k == "--procs") f.procs = std::atoi(value().c_str());
    else if (k == "--run-id") f.run_id = value();
    else if (k == "--token") f.token = value();
    else if (k == "--steady-seconds") f.steady_seconds = std::atoi(value().c_str());
    else if (k == "--status-rows") f.status_rows = true;
    else if (k == "--late") f.late = std::atoi(value().c_str());
    else if (k == "--server-pid") f.server_pid = std::atoi(value().c_str());
    else if (k == "--keep-alive-ms") f.keep_alive_ms = std::atoi(value().c_str());
    else return false;
  }
  return !f.endpoint.empty() && f.nodes > 0 && f.procs > 0 && f.late >= 0 && f.keep_alive_ms > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) {
    std::fprintf(stderr,
                 "usage: rdzv_load --endpoint HOST:PORT --nodes N [--procs 4] [--run-id load] [--token t]\n"
                 "                 [--steady-seconds S] [--status-rows] [--keep-alive-ms 5000] [--late K] [--server-pid PID]\n");
    return 2;
  }
  dtrun::SkipMutexDeadlockDetection();  // as dtrun does
  rlimit lim;
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ::signal(SIGPIPE, SIG_IGN);

  // Agents 0..N-1 join first; N..N+late-1 are the late ones. Each child takes a contiguous share
  // of both, so the late agents are spread over the processes too.
  const int total = f.nodes + f.late;
  auto share = [&](int of, int p) { return int(int64_t{of} * (p + 1) / f.procs) - int(int64_t{of} * p / f.procs); };
  std::vector<Child> children;
  for (int p = 0; p < f.procs; ++p) {
    const int count = share(f.nodes, p), late = share(f.late, p);
    int down[2], up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) return 1;
    std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid == 0) {
      for (const Child& c : children) {  // earlier children's pipes
        std::fclose(c.to);
        std::fclose(c.from);
      }
      ::close(down[1]);
      ::close(up[0]);
      ::_exit(ChildMain(f, p, count + late, ::fdopen(down[0], "r"), ::fdopen(up[1], "w")));
    }
    ::close(down[0]);
    ::close(up[1]);
    children.push_back(Child{pid, ::fdopen(down[1], "w"), ::fdopen(up[0], "r"), count, late});
  }

  ClientOptions o;
  o.endpoint = f.endpoint;
  o.run_id = f.run_id;
  o.token = f.token;
  int rc = 0;
  auto fail = [&](const char* phase) {
    std::printf("phase=%s error=timeout\n", phase);
    rc = 1;
  };

  // Formation: every child starts its regular agents at once.
  ServerSample s0 = SampleServer(f.server_pid);
  const int64_t t0 = NowNs();
  AskAll(children, [](const Child& c) { return "start 0 " + std::to_string(c.count); });
  const int64_t formed = Latest(AskAll(children, [&](const Child&) { return "await " + std::to_string(f.nodes) + " 0"; }));
  ServerSample s1 = SampleServer(f.server_pid);
  Report("formation", f.nodes, t0, formed, s0, s1, "procs=" + std::to_string(f.procs));
  if (formed < 0) fail("formation");

  // Steady: keep-alives at the service's interval (and status rows and queries).
  if (rc == 0 && f.steady_seconds > 0) {
    AskAll(children, [&](const Child&) { return "keepalive " + std::to_string(f.keep_alive_ms) + (f.status_rows ? " 1" : " 0"); });
    std::thread status;
    if (f.status_rows) status = std::thread([&] { AskStatus(o, f.steady_seconds); });
    ServerSample a = SampleServer(f.server_pid);
    const int64_t from = NowNs();
    std::this_thread::sleep_for(std::chrono::seconds(f.steady_seconds));  // the measured window
    ServerSample b = SampleServer(f.server_pid);
    const int64_t to = NowNs();
    int64_t sent = 0, failed = 0;
    for (const std::string& answer : AskAll(children, [](const Child&) { return "stop"; })) {
      long long s = 0, fl = 0;
      std::sscanf(answer.c_str(), "ok %lld %lld", &s, &fl);
      sent += s;
      failed += fl;
    }
    if (status.joinable()) status.join();
    const double seconds = (to - from) / 1e9;
    char extra[200];
    std::snprintf(extra, sizeof extra, "keep_alives_per_s=%.0f failed=%lld server_cpu_percent=%.2f status_rows=%d",
                  sent / seconds, static_cast<long long>(failed), (b.cpu_s - a.cpu_s) / seconds * 100, f.status_rows);
    Report("steady", f.nodes, from, to, a, b, extra);
    if (failed > 0) rc = 1;
  }

  // Restart: a worker fails on the first agent; every agent must learn the next round.
  if (rc == 0) {
    ServerSample a = SampleServer(f.server_pid);
    std::string answer = Ask(children[0], "fail");
    long long at = 0, round = 0;
    if (std::sscanf(answer.c_str(), "ok %lld %lld", &at, &round) != 2) {
      fail("restart");
    } else {
      const int64_t told = Latest(AskAll(children, [&](const Child&) {
        return "await " + std::to_string(f.nodes) + " " + std::to_string(round + 1);
      }));
      ServerSample b = SampleServer(f.server_pid);
      Report("restart", f.nodes, at, told, a, b);
      if (told < 0) fail("restart");
    }
  }

  // Late joins, then the same agents leave.
  if (rc == 0 && f.late > 0) {
    ServerSample a = SampleServer(f.server_pid);
    const int64_t from = NowNs();
    AskAll(children, [](const Child& c) { return "start " + std::to_string(c.count) + " " + std::to_string(c.late); });
    const int64_t joined = Latest(AskAll(children, [&](const Child&) { return "await " + std::to_string(total) + " 0"; }));
    ServerSample b = SampleServer(f.server_pid);
    Report("late_join", total, from, joined, a, b, "late=" + std::to_string(f.late));
    if (joined < 0) fail("late_join");
    if (rc == 0) {
      int64_t left_at = 0;
      for (const std::string& answer :
           AskAll(children, [](const Child& c) { return "leave " + std::to_string(c.count) + " " + std::to_string(c.late); })) {
        long long at = 0;
        if (std::sscanf(answer.c_str(), "ok %lld", &at) == 1 && (left_at == 0 || at < left_at)) left_at = at;
      }
      // Every remaining agent holds a round of N nodes formed after the leaves began.
      int64_t round_after = 0;
      if (auto summary = RendezvousClient::Create(o).value()->Status(); summary.ok()) round_after = summary->round;
      const int64_t settled = Latest(AskAll(children, [&](const Child&) {
        return "await " + std::to_string(f.nodes) + " " + std::to_string(std::max<int64_t>(round_after, 0));
      }));
      ServerSample c = SampleServer(f.server_pid);
      Report("leave", f.nodes, left_at, settled, b, c, "left=" + std::to_string(f.late));
      if (settled < 0) fail("leave");
    }
  }

  ServerSample end = SampleServer(f.server_pid);
  if (f.server_pid > 0) {
    std::printf("phase=memory nodes=%d server_peak_rss_mib=%.1f server_rss_kib_per_node=%.1f server_cpu_s_total=%.3f\n",
                total, end.hwm_bytes / 1048576.0, end.hwm_bytes / 1024.0 / total, end.cpu_s);
  }
  for (Child& c : children) std::fclose(c.to);  // the children end their agents and exit
  for (Child& c : children) {
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    std::fclose(c.from);
  }
  return rc;
}

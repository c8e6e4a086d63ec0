// Rendezvous load generator: N real gRPC clients (each its own channel and TCP connection) in
// one process join a running `dtrun rdzv-server` at once and long-poll until the round forms.
// Prints the time from the first Join to the last client holding its assignment.
// With STATUS_SECONDS, each client then acts as an agent of 8 workers for that long: a keep-alive
// with its status rows every 2 s (as GrpcRoundSource pushes them), while one more client asks for
// the whole job's status (`dtrun status --endpoint`) every second; prints pushes and query times.
// A negative STATUS_SECONDS sends the keep-alives at the same pace without rows (the baseline).
//   rdzv_load HOST:PORT N RUN_ID TOKEN [STATUS_SECONDS]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/rendezvous_client.h"

using dtrun::rdzv::ClientOptions;
using dtrun::rdzv::JobPhase;
using dtrun::rdzv::RendezvousClient;
using Clock = std::chrono::steady_clock;

constexpr int kWorkersPerNode = 8;

// One agent's status rows, as BuildNodeStatus fills them.
dtrun::status::NodeStatus Rows(int64_t step) {
  dtrun::status::NodeStatus node;
  node.round = 0;
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
    r.section_age_s = 0.12;
    r.heartbeat_age_s = 0.3;
    r.cpu_percent = 99;
    r.rss_bytes = int64_t{6} << 30;
    node.ranks.push_back(r);
  }
  return node;
}

void PushStatus(RendezvousClient& client, const std::string& node_id, int seconds, bool with_rows,
                std::atomic<int64_t>& pushes, std::atomic<int>& failed) {
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  for (int64_t step = 0; Clock::now() < end; ++step) {
    dtrun::status::NodeStatus rows = Rows(step);
    if (client.KeepAlive(node_id, std::chrono::seconds(10), with_rows ? &rows : nullptr).ok()) {
      pushes++;
    } else {
      failed++;
    }
    std::this_thread::sleep_for(dtrun::rdzv::GrpcRoundSource::kStatusPushInterval);  // the agents' pace
  }
}

// Once every client holds its assignment: the whole job's status once a second.
void AskStatus(const ClientOptions& o, std::atomic<int>& formed, int n, int seconds) {
  auto client = RendezvousClient::Create(o).value();
  while (formed.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // every node has pushed once
  std::vector<double> ms;
  size_t rows = 0;
  const auto end = Clock::now() + std::chrono::seconds(std::max(1, seconds - 4));
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    auto s = client->Status();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    rows = 0;
    if (s.ok()) {
      for (const auto& node : s->progress) rows += node.ranks.size();
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::sort(ms.begin(), ms.end());
  std::printf("status_queries=%zu rows=%zu query_ms_median=%.1f query_ms_max=%.1f\n", ms.size(), rows,
              ms.empty() ? 0 : ms[ms.size() / 2], ms.empty() ? 0 : ms.back());
}

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: rdzv_load HOST:PORT N RUN_ID TOKEN [STATUS_SECONDS]\n");
    return 2;
  }
  rlimit lim;
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  const int n = std::atoi(argv[2]);
  const int status_arg = argc == 6 ? std::atoi(argv[5]) : 0;
  const int status_seconds = std::abs(status_arg);
  const bool with_rows = status_arg > 0;
  const int nproc = status_seconds > 0 ? kWorkersPerNode : 1;
  ClientOptions o;
  o.endpoint = argv[1];
  o.run_id = argv[3];
  o.token = argv[4];
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(std::move(RendezvousClient::Create(o).value()));
  std::atomic<int> formed{0}, failed{0};
  std::atomic<int64_t> pushes{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<Clock::time_point> done(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();  // start together (benchmark only)
      dtrun::rdzv::NodeInfo node{"load" + std::to_string(i), nproc, "127.0.0.1", 1, -1};
      auto join = clients[i]->Join(node, Clock::now() + std::chrono::seconds(60));
      if (!join.ok()) {
        failed++;
        return;
      }
      uint64_t after = 0;
      for (;;) {
        auto view = clients[i]->Watch(join->node_id, after, std::chrono::seconds(30));
        if (!view.ok()) {
          failed++;
          return;
        }
        after = view->version;
        if (view->phase == JobPhase::kRunning && view->assignment) break;
      }
      done[i] = Clock::now();
      formed++;
      if (status_seconds > 0) PushStatus(*clients[i], join->node_id, status_seconds, with_rows, pushes, failed);
    });
  }
  auto start = Clock::now();
  go = true;
  if (status_seconds > 0) threads.emplace_back([&] { AskStatus(o, formed, n, status_seconds); });
  for (auto& t : threads) t.join();
  auto last = start;
  for (auto& t : done) last = std::max(last, t);
  std::printf("clients=%d formed=%d failed=%d round_formed_ms=%.1f status_pushes=%lld\n", n, formed.load(),
              failed.load(), std::chrono::duration<double, std::milli>(last - start).count(),
              static_cast<long long>(pushes.load()));
  // Leave so the server can finish.
  return failed.load() == 0 ? 0 : 1;
}

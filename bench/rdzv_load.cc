// Rendezvous load generator: N real gRPC clients (each its own channel and TCP connection) in
// one process join a running `dtrun rdzv-server` at once and long-poll until the round forms.
// Prints the time from the first Join to the last client holding its assignment.
//   rdzv_load HOST:PORT N RUN_ID TOKEN
#include <sys/resource.h>

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

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: rdzv_load HOST:PORT N RUN_ID TOKEN\n");
    return 2;
  }
  rlimit lim;
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  const int n = std::atoi(argv[2]);
  ClientOptions o;
  o.endpoint = argv[1];
  o.run_id = argv[3];
  o.token = argv[4];
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < n; ++i) clients.push_back(std::move(RendezvousClient::Create(o).value()));
  std::atomic<int> formed{0}, failed{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<Clock::time_point> done(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();  // start together (benchmark only)
      dtrun::rdzv::NodeInfo node{"load" + std::to_string(i), 1, "127.0.0.1", 1, -1};
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
    });
  }
  auto start = Clock::now();
  go = true;
  for (auto& t : threads) t.join();
  auto last = start;
  for (auto& t : done) last = std::max(last, t);
  std::printf("clients=%d formed=%d failed=%d round_formed_ms=%.1f\n", n, formed.load(), failed.load(),
              std::chrono::duration<double, std::milli>(last - start).count());
  // Leave so the server can finish.
  return failed.load() == 0 ? 0 : 1;
}

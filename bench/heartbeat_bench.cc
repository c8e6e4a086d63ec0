// What a progress report costs the worker that sends it (progress/progress_client.h): N heartbeats
// (and N begin/end section pairs) to a bound agent socket that a thread drains as the agent would,
// and the same calls with no agent (not under dtrun: a no-op).
//   heartbeat_bench [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <atomic>

#include "progress/progress_client.h"
#include "progress/progress_socket.h"

namespace {

template <typename F>
double NanosPerCall(int n, F f) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrun::progress;
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  const std::string path = "/tmp/heartbeat_bench." + std::to_string(::getpid()) + ".sock";
  auto socket = ProgressSocket::Bind(path);
  if (!socket.ok()) {
    std::fprintf(stderr, "%s\n", std::string(socket.status().message()).c_str());
    return 1;
  }
  std::atomic<bool> done{false};
  std::atomic<long> received{0};
  std::thread agent([&] {
    while (!done) {
      received += socket->Drain(256, [](pid_t, absl::string_view) {});
    }
  });
  ProgressClient client(path), off("");
  double beat = NanosPerCall(n, [&](int i) { client.Beat(i, i * 256L); });
  double section = NanosPerCall(n, [&](int) {
    client.Begin("step");
    client.End("step");
  });
  double noop = NanosPerCall(n, [&](int i) { off.Beat(i, i * 256L); });
  done = true;
  agent.join();
  std::printf("heartbeat: %.0f ns/call; begin+end section: %.0f ns/pair; not under dtrun: %.1f ns/call; "
              "%ld of %d datagrams reached the agent thread\n",
              beat, section, noop, received.load(), 3 * n);
  return 0;
}

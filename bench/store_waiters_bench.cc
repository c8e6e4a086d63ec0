// The store's core (no sockets) with every worker of a large job waiting on one key: what the
// release costs, and what it costs when the job dies instead and every waiter disconnects.
//   store_waiters_bench [CLIENTS]   (default 80000: 10,000 nodes of 8 workers)
// Each client sends ADD(count, 1) and WAIT(go) in LibTorch 1.13's numbering. "release": one more
// client SETs go and every reply is taken. "disconnect": the same waiters, then all disconnect.
// Prints one JSON line of seconds (the socket side is bench/store_fanin.cc).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "agent/store_core.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kSet = 0, kAdd = 3, kWait = 5;

std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(v)); }
std::string Str(const std::string& s) { return U64(s.size()) + s; }
std::string Op(uint8_t op) { return std::string(1, static_cast<char>(op)); }

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Returns the seconds to register `clients` waiters on "go".
double Arrive(dtrun::StoreCore& core, uint64_t clients) {
  const std::string request = Op(kAdd) + Str("count") + U64(1) + Op(kWait) + U64(1) + Str("go");
  const Clock::time_point start = Clock::now();
  for (uint64_t id = 0; id < clients; ++id) core.OnData(id, request);
  for (dtrun::StoreClientId id : core.TakeClientsWithOutput()) core.TakeOutput(id);
  return Seconds(start);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t clients = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 80000;
  dtrun::StoreCore released;
  const double arrive_s = Arrive(released, clients);
  Clock::time_point start = Clock::now();
  released.OnData(clients, Op(kSet) + Str("go") + Str("1"));
  size_t answered = 0;
  for (dtrun::StoreClientId id : released.TakeClientsWithOutput()) answered += released.TakeOutput(id).size();
  const double release_s = Seconds(start);

  dtrun::StoreCore abandoned;
  Arrive(abandoned, clients);
  start = Clock::now();
  for (uint64_t id = 0; id < clients; ++id) abandoned.OnDisconnect(id);
  const double disconnect_s = Seconds(start);

  std::printf(
      "{\"clients\": %llu, \"arrive_s\": %.4f, \"release_s\": %.4f, \"answered\": %zu, \"disconnect_s\": %.4f}\n",
      static_cast<unsigned long long>(clients), arrive_s, release_s, answered, disconnect_s);
  return answered == clients ? 0 : 1;
}

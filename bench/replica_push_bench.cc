// Buddy copy throughput over loopback gRPC: one agent's sender pushing one snapshot of --mb MB to
// a Replica service in this process, unpaced, --repeat times. Reports the wall time per copy and
// the CPU seconds per copy of the whole process (sender and receiver) and of the sending thread;
// the sender's share is what --snapshot-buddy-every's 25% duty cycle is applied to.
// --declared-port 1: as on the node that hosts the rendezvous, the copies go to the store's port,
// which hands the connection to the rendezvous server's Replica service (plaintext); 2: the store
// relays it there instead, as it does with TLS (here without TLS: the relay's CPU alone, the
// process's).
//   replica_push_bench [--mb 90] [--repeat 5] [--declared-port 0|1|2]
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "agent/tcp_store_server.h"
#include "rendezvous/rendezvous_server.h"
#include "replica/replica_grpc.h"

namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mb = 90;
  int repeat = 5;
  int declared_port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) mb = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--declared-port") == 0) declared_port = std::atoi(argv[i + 1]);
  }
  if (mb == 0 || mb > 4096 || repeat <= 0) {
    std::fprintf(stderr, "replica_push_bench: --mb must be 1..4096 and --repeat positive\n");
    return 2;
  }
  constexpr uint64_t kJob = 1;
  dtrun::rdzv::ClientOptions job;
  job.run_id = "bench";
  job.token = "bench";
  const uint64_t cap = (mb + 1) << 20;
  auto keeper = std::make_shared<dtrun::replica::ReplicaKeeper>(kJob, cap, 1);
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "replica_push_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  };
  std::unique_ptr<dtrun::replica::ReplicaServer> server;
  std::unique_ptr<dtrun::rdzv::RendezvousServer> rendezvous;
  std::unique_ptr<dtrun::TcpStoreServer> store;
  int port = 0;
  if (declared_port) {
    dtrun::rdzv::RendezvousOptions options;
    options.run_id = job.run_id;
    options.token = job.token;
    auto started = dtrun::rdzv::RendezvousServer::Start("127.0.0.1", 0, options, {},
                                                        dtrun::replica::NewReplicaService(job, keeper));
    if (!started.ok()) return fail(started.status());
    rendezvous = std::move(*started);
    std::function<void(int)> hand_off;
    if (declared_port == 1) hand_off = [r = rendezvous.get()](int fd) { r->Adopt(fd); };
    auto relay = dtrun::TcpStoreServer::Start("127.0.0.1", 0, static_cast<uint16_t>(rendezvous->port()),
                                              dtrun::SlowClientRule(), hand_off);
    if (!relay.ok()) return fail(relay.status());
    store = std::move(*relay);
    port = store->port();
  } else {
    auto started = dtrun::replica::StartReplicaServer("127.0.0.1", 0, job, keeper);
    if (!started.ok()) return fail(started.status());
    server = std::move(*started);
    port = server->port();
  }
  std::unique_ptr<dtrun::replica::BuddyChannel> buddy = dtrun::replica::ConnectBuddy("127.0.0.1", port, job, kJob, cap);
  auto owned = std::make_shared<std::string>(mb << 20, '\0');
  std::string& payload = *owned;
  for (size_t i = 0; i < payload.size(); i += 64) payload[i] = static_cast<char>(i >> 6);
  for (int r = 0; r < repeat; ++r) {
    dtrun::snapshot::SlotHeader h{kJob, 0, 2, r + 1, 0, payload.size(),
                                  dtrun::snapshot::PayloadHash(payload.data(), payload.size()), 0};
    const auto start = std::chrono::steady_clock::now();
    const double process = Seconds(CLOCK_PROCESS_CPUTIME_ID), thread = Seconds(CLOCK_THREAD_CPUTIME_ID);
    absl::StatusOr<int64_t> kept = buddy->Push(h, {payload, owned}, [](double) { return true; });
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!kept.ok()) return fail(kept.status());
    std::printf("copy=%d mb=%zu wall_s=%.3f mb_per_s=%.0f process_cpu_s=%.3f sender_cpu_s=%.3f\n", r + 1, mb, wall,
                static_cast<double>(mb) / wall, Seconds(CLOCK_PROCESS_CPUTIME_ID) - process,
                Seconds(CLOCK_THREAD_CPUTIME_ID) - thread);
  }
  return 0;
}

// Rendezvous settings: torchrun's --rdzv-conf keys with torchrun's defaults, plus dtrun's own.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun::rdzv {

using Duration = std::chrono::milliseconds;

struct RendezvousOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  bool static_ranks = true;  // --node-rank given (static backend); else the service assigns ranks
  int max_restarts = 0;      // job-wide, counted once per worker failure
  // --on-straggler replace: an elastic job swaps the node that holds a named straggler for a spare,
  // once (docs/DESIGN.md, "Stragglers").
  bool replace_stragglers = false;
  std::string run_id = "none";
  std::string token;         // agents must present it; empty = no check
  // In every node id this service gives ("node3.<instance>-host"), so an id given by an earlier
  // instance of it (its host's dtrun started again) is unknown here, and its agent joins again
  // instead of renewing a lease the new instance gave another node. Empty: "node3-host".
  std::string instance;
  // The workers' TCPStore for every round is served on the service's own endpoint (the agent that
  // hosts the service, or `dtrun rdzv-server`, passes gRPC from that port on to the service:
  // launcher/rendezvous_host.h), as torchrun's workers see MASTER_ADDR:MASTER_PORT = the
  // rendezvous endpoint. Assignments then name no store address: each agent puts the endpoint it
  // reaches the service at in its place (rendezvous/workers_store.h). False: the store of the
  // agent of group rank 0 (the in-process rounds of a single-node job).
  bool workers_store_at_endpoint = false;
  // With workers_store_at_endpoint: how many workers that store takes (half its host's open-file
  // limit, agent/tcp_store_server.h); a round of more is said at once (0: not known).
  int64_t workers_store_capacity = 0;

  Duration join_timeout{600000};       // a round must form within this (and a lost static node return)
  Duration last_call_timeout{30000};   // elastic: extra wait for more nodes once min is reached
  Duration close_timeout{30000};       // accepted for compatibility
  Duration keep_alive_interval{5000};  // agents send a keep-alive this often
  int keep_alive_max_attempt = 3;      // a node is lost after interval × attempts without one
  Duration heartbeat_timeout{30000};   // accepted for compatibility
  Duration read_timeout{60000};        // accepted for compatibility
  Duration exit_barrier_timeout{300000};  // how long finished nodes wait for the others

  Duration lease() const { return keep_alive_interval * keep_alive_max_attempt; }
};

// Mutual TLS, read from the files at start (launcher/credentials.h). The service requires and
// verifies every node's certificate with `ca_pem`; a node verifies the service's with it.
struct TlsCredentials {
  std::string cert_pem;  // this side's certificate (chain); empty: plaintext
  std::string key_pem;   // its private key
  std::string ca_pem;
  bool enabled() const { return !cert_pem.empty(); }
};

struct ClientOptions {
  std::string endpoint;  // HOST:PORT of the service
  std::string run_id = "none";
  std::string token;
  TlsCredentials tls;
};

// Applies --rdzv-conf keys (seconds, as torchrun takes them; fractions allowed); a bad value is
// InvalidArgument naming the key. `is_host` is read by the launcher, not here. Keys dtrun has no
// use for (torchrun's store options such as use_libuv and store_type, and any other: torchrun's
// backends ignore what they do not read) are left to `ignored`, for a line at start.
absl::Status ApplyRdzvConf(const std::map<std::string, std::string>& conf, RendezvousOptions& options,
                           std::vector<std::string>* ignored = nullptr);

}  // namespace dtrun::rdzv

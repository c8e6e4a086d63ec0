#include "launcher/launch_topology.h"

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/random_hex.h"
#include "base/status_macros.h"
#include "rendezvous/rendezvous_options.h"

namespace dtrun {
namespace {

// Formatted like torchrun's uuid4 run ids.
std::string FreshRunId() {
  std::string h = RandomHex(32);
  return absl::StrCat(h.substr(0, 8), "-", h.substr(8, 4), "-", h.substr(12, 4), "-", h.substr(16, 4), "-",
                      h.substr(20));
}

}  // namespace

absl::Status FillTopology(const RawFlags& f, const HostProbe& host, LaunchConfig& c) {
  AgentOptions& a = c.agent;
  c.rdzv_backend = f.rdzv_backend;
  c.rdzv_endpoint = f.rdzv_endpoint;
  a.run_id = f.rdzv_id;
  // "[::1]" as torchrun users write IPv6 addresses: the address itself for the store and workers.
  a.master_addr = f.master_addr.size() > 2 && f.master_addr.front() == '[' && f.master_addr.back() == ']'
                      ? f.master_addr.substr(1, f.master_addr.size() - 2)
                      : f.master_addr;
  a.master_port = f.master_port;
  if (f.on_straggler != "warn" && f.on_straggler != "replace") {
    return BadFlag(absl::StrCat("--on-straggler ", f.on_straggler, " is not warn or replace"));
  }
  if (f.on_straggler == "replace" && (f.rdzv_backend != "c10d" || c.max_nodes < 2)) {
    return BadFlag("--on-straggler replace needs an elastic multi-node job (--rdzv-backend c10d, --nnodes MIN:MAX) "
               "with a spare node to swap in; use warn");
  }
  if (f.rdzv_backend != "static" && f.rdzv_backend != "c10d") {
    return BadFlag(absl::StrCat("--rdzv-backend ", f.rdzv_backend, " is not supported; use c10d (dtrun's rendezvous "
                            "service) or static"));
  }
  if (f.standalone && c.max_nodes > 1) {
    return BadFlag(absl::StrCat("--standalone runs one node, but --nnodes is ", f.nnodes,
                            "; drop --standalone for a multi-node job"));
  }
  // --standalone, and (as torchrun since PR #175699) a single-node job that did not say where its
  // workers meet: a kernel-chosen port, so two jobs on one host never collide (--standalone also
  // gets a fresh run id). Workers see torchrun's "localhost"; the store listens on loopback only.
  if (f.standalone || (c.max_nodes == 1 && !f.meeting_point_given)) {
    c.topology = f.standalone ? Topology::kStandalone : Topology::kSingleNode;
    if (f.standalone) a.run_id = FreshRunId();
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    a.master_addr = "localhost";
    a.store_bind_addr = "127.0.0.1";
    a.master_port = 0;
    return absl::OkStatus();
  }
  c.topology = c.max_nodes > 1 ? Topology::kJoinService : Topology::kSingleNode;
  const bool dynamic = c.rdzv_backend != "static";
  if (!dynamic && !f.rdzv_endpoint.empty()) {
    // As torchrun: with the static backend the endpoint is the master's address and port
    // (PyTorch's own examples launch this way).
    DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, f.master_port));
    std::tie(a.master_addr, a.master_port) = ep;
  }
  if (!dynamic && (a.master_addr.empty() || a.master_addr == "[]")) {
    // `--master-addr $MASTER_ADDR` with the variable unset: said at once, not waited on as a host
    // that does not resolve yet (up to join_timeout).
    return BadFlag(
        "--master-addr is empty (an unset variable in the command line?); give the address or name of "
        "the node with node rank 0");
  }
  if (!c.multi_node()) {
    if (dynamic && !f.rdzv_endpoint.empty()) {
      DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, 29400));
      std::tie(a.master_addr, a.master_port) = ep;
    }
    return absl::OkStatus();
  }
  rdzv::RendezvousOptions& r = c.rdzv;
  r.replace_stragglers = f.on_straggler == "replace";
  r.min_nodes = c.min_nodes;
  r.max_nodes = c.max_nodes;
  r.static_ranks = !dynamic;
  r.max_restarts = a.max_restarts;
  r.run_id = a.run_id;
  DT_RETURN_IF_ERROR(rdzv::ApplyRdzvConf(c.rdzv_conf, r));
  if (!dynamic && c.min_nodes != c.max_nodes) {
    return BadFlag(absl::StrCat("--nnodes ", f.nnodes, " is elastic; use --rdzv-backend c10d with --rdzv-endpoint"));
  }
  if (dynamic) {
    if (f.rdzv_endpoint.empty()) return BadFlag("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]");
    DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, 29400));
    std::tie(c.service_host, c.service_port) = ep;
    auto is_host = c.rdzv_conf.find("is_host");
    if (is_host != c.rdzv_conf.end()) {
      if (is_host->second == "1" || is_host->second == "true" || is_host->second == "True") {
        c.topology = Topology::kHostService;
      }
    } else if (host.IsThisHost(c.service_host)) {
      c.topology = Topology::kHostIfFree;  // as torchrun: the first local agent to bind it hosts
    }
  } else {
    c.service_host = a.master_addr;
    c.service_port = a.master_port;
    if (f.node_rank == 0) c.topology = Topology::kHostService;
  }
  if (c.service_port == 0) {
    return BadFlag(absl::StrCat("a multi-node job needs a fixed port that every node can reach; give ",
                            dynamic ? "--rdzv-endpoint HOST:PORT" : "--master-port", " a port other than 0"));
  }
  if (a.local_addr.empty()) {
    // A name that does not resolve yet (a Kubernetes service before its pod is up) is waited for
    // at launch, up to join_timeout (AwaitRendezvousHost).
    if (std::optional<std::string> local = host.LocalAddressFacing(c.service_host, c.service_port)) {
      a.local_addr = *local;
      a.socket_ifname = host.InterfaceWithAddress(a.local_addr).value_or("");
    }
  }
  c.credential_flags = f.credentials;  // read by LoadLaunchCredentials, after parsing
  return absl::OkStatus();
}

}  // namespace dtrun

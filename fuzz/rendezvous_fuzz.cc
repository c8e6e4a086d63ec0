// libFuzzer: the rendezvous service's request handling without gRPC — wire requests (any bytes,
// parsed as the v1 messages) applied to the state machine in any order, with time moving, and
// every node's view encoded back, and the job's status (with the rows nodes pushed) at the end.
// Nothing crashes, overflows or throws.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/rendezvous.pb.h"
#include "rendezvous/rendezvous_state.h"
#include "rendezvous/wire.h"

namespace {

using namespace dtrun::rdzv;

RendezvousOptions Options(uint8_t shape) {
  RendezvousOptions o;
  o.min_nodes = 1 + shape % 3;
  o.max_nodes = o.min_nodes + (shape >> 2) % 3;
  o.static_ranks = (shape & 0x80) != 0 && o.min_nodes == o.max_nodes;
  o.max_restarts = (shape >> 4) % 3;
  o.replace_stragglers = (shape & 0x40) != 0;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto now = std::chrono::steady_clock::time_point{};
  RendezvousState state(Options(data[0]), now);
  std::vector<std::string> ids;
  // Each step: [kind][length][bytes of that request's wire message].
  for (size_t at = 1; at + 2 <= size;) {
    const uint8_t kind = data[at] % 6;
    const size_t n = std::min<size_t>(data[at + 1], size - at - 2);
    const void* bytes = data + at + 2;
    at += 2 + n;
    auto node = [&](const std::string& wire_id) { return ids.empty() || !wire_id.empty() ? wire_id : ids[n % ids.size()]; };
    switch (kind) {
      case 0: {
        v1::JoinRequest req;
        if (!req.ParseFromArray(bytes, static_cast<int>(n))) break;
        absl::StatusOr<std::string> id = state.Join(FromWire(req), now);
        if (id.ok()) ids.push_back(*id);
        break;
      }
      case 1: {
        v1::OutcomeRequest req;
        if (!req.ParseFromArray(bytes, static_cast<int>(n))) break;
        const std::string id = node(req.node_id());
        (void)(req.success() ? state.ReportSuccess(id, req.round(), now)
                             : state.ReportFailure(id, req.round(), FailuresFromWire(req), now));
        break;
      }
      case 2: {
        v1::KeepAliveRequest req;
        if (!req.ParseFromArray(bytes, static_cast<int>(n))) break;
        const std::string id = node(req.node_id());
        if (state.KeepAlive(id, now).ok() && req.has_progress()) {
          (void)state.SetProgress(id, FromWire(req.progress()));
          state.MaybeReplaceStraggler(now);  // the waits in the summary may name a straggler
        }
        break;
      }
      case 3: {
        v1::LeaveRequest req;
        if (req.ParseFromArray(bytes, static_cast<int>(n))) (void)state.Leave(node(req.node_id()), now);
        break;
      }
      case 4:
        now += std::chrono::milliseconds(1000 * (n + 1));
        state.Tick(now);
        break;
      case 5:
        state.Kill("fuzz");
        break;
    }
    for (const std::string& id : ids) {
      absl::StatusOr<NodeView> view = state.View(id);
      if (!view.ok()) continue;
      v1::WatchResponse wire;
      ToWire(*view, &wire);
      FromWire(wire);
    }
  }
  JobSummary summary = state.Summary();
  summary.progress = state.Progress();
  for (const dtrun::status::NodeStatus& node : summary.progress) {
    if (node.ranks.size() > dtrun::status::kMaxRanksPerNode) __builtin_trap();  // kept within bounds
  }
  v1::StatusResponse wire;
  ToWire(summary, &wire);
  FromWire(wire);
  return 0;
}

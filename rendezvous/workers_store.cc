#include "rendezvous/workers_store.h"

#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "base/endpoint.h"

namespace dtrun::rdzv {

void PlaceWorkersStoreAtEndpoint(Assignment& assignment, const std::string& endpoint) {
  if (!assignment.master_addr.empty() || assignment.master_port != 0) return;
  absl::StatusOr<std::pair<std::string, int>> at = ParseEndpoint(endpoint, 0);
  if (!at.ok()) return;
  std::tie(assignment.master_addr, assignment.master_port) = *at;
}

}  // namespace dtrun::rdzv

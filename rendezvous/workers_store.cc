#include "rendezvous/workers_store.h"

#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/open_file_limit.h"

namespace dtrun::rdzv {

void PlaceWorkersStoreAtEndpoint(Assignment& assignment, const std::string& endpoint) {
  if (!assignment.master_addr.empty() || assignment.master_port != 0) return;
  absl::StatusOr<std::pair<std::string, int>> at = ParseEndpoint(endpoint, 0);
  if (!at.ok()) return;
  std::tie(assignment.master_addr, assignment.master_port) = *at;
}

std::string StoreTooSmallWarning(int64_t round, int64_t world_size, int64_t capacity) {
  if (capacity <= 0 || world_size <= capacity) return "";
  return absl::StrCat("round ", round, " has ", world_size, " workers, and the workers' store on this host takes ",
                      capacity, " (half its open-file limit): the other ", world_size - capacity,
                      " will be refused when they connect. Raise the hard limit on this host (", kRaiseOpenFileLimit,
                      ") and start again, or serve the job from `dtrun rdzv-server` on a host with a higher one");
}

}  // namespace dtrun::rdzv

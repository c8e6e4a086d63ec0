// The wire between buddies, as the agent sees it: no gRPC types here (gRPC lives in the
// multi-node module, rendezvous/grpc_module.h; replica_grpc.cc implements these).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "replica/replica_keeper.h"

namespace dtrun::replica {

// Bytes per chunk on the wire: small enough to pace, large enough to cost little per message.
inline constexpr size_t kChunkBytes = 1 << 20;

// Bytes that gRPC reads where they lie, and what keeps them there: gRPC may hold them after the
// call that sent them has ended (a cancelled stream's last frames).
struct SharedBytes {
  absl::string_view bytes;
  std::shared_ptr<const void> owner;
};

// Serves Push and Fetch for `keeper` until destroyed.
class ReplicaServer {
 public:
  virtual ~ReplicaServer() = default;
  virtual int port() const = 0;
};

// This agent's end of the channel to its buddy.
class BuddyChannel {
 public:
  virtual ~BuddyChannel() = default;
  // Sends one copy of `payload`, read in place. `pace` runs after each chunk with the seconds it took to send; it may
  // sleep, and returns false to abandon the copy (stopping). Returns the newest step the buddy now holds for the rank.
  virtual absl::StatusOr<int64_t> Push(const snapshot::SlotHeader& header, const SharedBytes& payload,
                                       const std::function<bool(double)>& pace) = 0;
  // The buddy's copies of `rank` in a job of `world_size`, newest first, each checked as a pushed
  // copy is (cap, job, checksum).
  virtual absl::StatusOr<std::vector<Copy>> Fetch(int64_t rank, int64_t world_size,
                                                  std::chrono::milliseconds timeout) = 0;
  // Ends calls in flight at once (shutdown).
  virtual void Cancel() = 0;
};

}  // namespace dtrun::replica

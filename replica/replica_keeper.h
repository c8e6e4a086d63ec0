// Buddy copies of in-memory snapshots (docs/DESIGN.md, "Buddy copies"): the receiving side.
// Each agent copies its node's snapshots to its buddy (the node of the next group rank); the buddy
// keeps the newest two per rank, so a node lost with its memory can be restored elsewhere. Plain
// C++: the gRPC service (replica_grpc.cc) only feeds chunks in and reads copies out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "snapshot/snapshot_region.h"

namespace dtrun::replica {

// One rank's snapshot as it travels: its slot header and payload.
struct Copy {
  snapshot::SlotHeader header;
  std::string payload;
};
using CopyPtr = std::shared_ptr<const Copy>;

// Rebuilds one copy from the pieces of a stream, trusting none of them: the header must be of
// this job and within the cap, the data may not exceed what the header declared, and the whole
// must match the header's checksum. Memory grows with the bytes received, not the bytes declared.
class CopyAssembler {
 public:
  CopyAssembler(uint64_t job, uint64_t max_payload_bytes) : job_(job), max_payload_bytes_(max_payload_bytes) {}
  // InvalidArgument / ResourceExhausted name what is wrong with the header. The payload goes into
  // `buffer` (its contents dropped, its memory reused: ReplicaKeeper::SpareBuffer); it grows only
  // as bytes arrive, never to a size the header merely declares.
  absl::Status Begin(const snapshot::SlotHeader& header, std::string buffer = {});
  // OutOfRange if the data runs past the declared size; FailedPrecondition before Begin.
  absl::Status Add(absl::string_view data);
  // DataLoss if the copy is short or does not match its checksum. Ends the copy either way.
  absl::StatusOr<Copy> Finish();
  bool started() const { return started_; }

 private:
  uint64_t job_;
  uint64_t max_payload_bytes_;
  bool started_ = false;
  Copy copy_;
};

// What a keeper holds for one rank, for status and logs.
struct Held {
  int64_t rank = 0;
  int64_t world_size = 0;
  std::vector<int64_t> steps;  // newest first
  uint64_t bytes = 0;
};

// The copies this agent keeps for other nodes' ranks: the newest two per (rank, world size), for
// at most `max_ranks` ranks (the ranks copied longest ago go first). Thread-safe.
//
// The payload of a copy let go (replaced by a newer one, and no Fetch still sending it) is kept
// as one spare buffer for the next copy to arrive: a fresh 90 MB buffer costs some 22,000 page
// faults, most of what receiving a copy cost (bench/replica_push_bench). So a keeper holds at most
// one copy's memory more than the copies it keeps.
class ReplicaKeeper {
 public:
  static constexpr int kCopiesPerRank = 2;
  ReplicaKeeper(uint64_t job, uint64_t max_payload_bytes, int max_ranks)
      : job_(job), max_payload_bytes_(max_payload_bytes), max_ranks_(max_ranks) {}

  uint64_t job() const { return job_; }
  uint64_t max_payload_bytes() const { return max_payload_bytes_; }
  // Keeps `copy` unless both copies held for its rank are newer or of the same step. Returns the
  // newest step now held for the rank.
  int64_t Keep(Copy copy);
  // The copies held for `rank` in a job of `world_size`, newest first.
  std::vector<CopyPtr> Copies(int64_t rank, int64_t world_size) const;
  std::vector<Held> Summary() const;
  // The spare payload buffer, if any (empty, with its memory); an empty string otherwise.
  std::string SpareBuffer() { return spare_->Take(); }

 private:
  // Where let-go payloads wait for reuse; shared with the copies' deleters, which may run after
  // the keeper is gone (a Fetch still holding a copy).
  class Spare {
   public:
    std::string Take();
    void Offer(std::string payload);

   private:
    absl::Mutex mu_;
    std::string buffer_ ABSL_GUARDED_BY(mu_);
  };

  using Key = std::pair<int64_t, int64_t>;  // rank, world size
  struct Slot {
    std::vector<CopyPtr> copies;  // newest first
    uint64_t touched = 0;         // Keep's sequence number
  };
  const uint64_t job_;
  const uint64_t max_payload_bytes_;
  const int max_ranks_;
  mutable absl::Mutex mu_;
  std::map<Key, Slot> held_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Spare> spare_ = std::make_shared<Spare>();
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dtrun::replica

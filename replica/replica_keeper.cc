#include "replica/replica_keeper.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrun::replica {

absl::Status CopyAssembler::Begin(const snapshot::SlotHeader& h, std::string buffer) {
  started_ = false;
  copy_ = Copy{};
  buffer.clear();
  copy_.payload = std::move(buffer);
  if (h.job != job_) return absl::InvalidArgumentError("a snapshot copy from another job (its job hash differs)");
  if (h.rank < 0 || h.world_size <= 0 || h.rank >= h.world_size || h.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a snapshot copy with rank ", h.rank, ", world size ",
                                                   h.world_size, " and step ", h.step, " (not a valid rank or step)"));
  }
  if (h.payload_bytes > max_payload_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("a snapshot copy of rank ", h.rank, " of ", h.payload_bytes,
                                                     " bytes is over this node's cap of ", max_payload_bytes_,
                                                     " (raise --snapshot-memory on this node)"));
  }
  copy_.header = h;
  started_ = true;
  return absl::OkStatus();
}

absl::Status CopyAssembler::Add(absl::string_view data) {
  if (!started_) return absl::FailedPreconditionError("snapshot copy data before its header");
  if (data.size() > copy_.header.payload_bytes - copy_.payload.size()) {
    started_ = false;
    return absl::OutOfRangeError(absl::StrCat("the snapshot copy of rank ", copy_.header.rank, " step ",
                                              copy_.header.step, " runs past its declared ",
                                              copy_.header.payload_bytes, " bytes"));
  }
  copy_.payload.append(data.data(), data.size());
  return absl::OkStatus();
}

absl::StatusOr<Copy> CopyAssembler::Finish() {
  if (!started_) return absl::FailedPreconditionError("no snapshot copy was begun");
  started_ = false;
  const snapshot::SlotHeader& h = copy_.header;
  if (copy_.payload.size() != h.payload_bytes) {
    return absl::DataLossError(absl::StrCat("the snapshot copy of rank ", h.rank, " step ", h.step, " ended after ",
                                            copy_.payload.size(), " of ", h.payload_bytes, " bytes"));
  }
  if (snapshot::PayloadHash(copy_.payload.data(), copy_.payload.size()) != h.payload_hash) {
    return absl::DataLossError(absl::StrCat("the snapshot copy of rank ", h.rank, " step ", h.step,
                                            " does not match its checksum (corrupted on the way)"));
  }
  return std::move(copy_);
}

int64_t ReplicaKeeper::Keep(Copy copy) {
  absl::MutexLock lock(&mu_);
  const Key key{copy.header.rank, copy.header.world_size};
  Slot& slot = held_[key];
  slot.touched = ++seq_;
  std::vector<CopyPtr>& copies = slot.copies;
  const int64_t step = copy.header.step;
  const bool known = std::any_of(copies.begin(), copies.end(), [&](const CopyPtr& c) { return c->header.step == step; });
  const bool older = copies.size() >= kCopiesPerRank && step < copies.back()->header.step;
  if (!known && !older) {
    // When the last holder lets the copy go, its payload becomes the spare buffer.
    std::weak_ptr<Spare> spare = spare_;
    copies.push_back(CopyPtr(new Copy(std::move(copy)), [spare](const Copy* c) {
      std::unique_ptr<Copy> owned(const_cast<Copy*>(c));
      if (std::shared_ptr<Spare> s = spare.lock()) s->Offer(std::move(owned->payload));
    }));
    std::sort(copies.begin(), copies.end(), [](const CopyPtr& a, const CopyPtr& b) { return a->header.step > b->header.step; });
    if (copies.size() > kCopiesPerRank) copies.resize(kCopiesPerRank);
  }
  while (static_cast<int>(held_.size()) > max_ranks_) {
    auto oldest = std::min_element(held_.begin(), held_.end(),
                                   [](const auto& a, const auto& b) { return a.second.touched < b.second.touched; });
    held_.erase(oldest);
  }
  auto it = held_.find(key);
  return it == held_.end() || it->second.copies.empty() ? -1 : it->second.copies.front()->header.step;
}

std::string ReplicaKeeper::Spare::Take() {
  absl::MutexLock lock(&mu_);
  return std::exchange(buffer_, std::string());
}

void ReplicaKeeper::Spare::Offer(std::string payload) {
  absl::MutexLock lock(&mu_);
  if (payload.capacity() > buffer_.capacity()) buffer_ = std::move(payload);  // keep the larger one
}

std::vector<CopyPtr> ReplicaKeeper::Copies(int64_t rank, int64_t world_size) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find({rank, world_size});
  return it == held_.end() ? std::vector<CopyPtr>{} : it->second.copies;
}

std::vector<Held> ReplicaKeeper::Summary() const {
  absl::MutexLock lock(&mu_);
  std::vector<Held> out;
  for (const auto& [key, slot] : held_) {
    Held h{key.first, key.second, {}, 0};
    for (const CopyPtr& c : slot.copies) {
      h.steps.push_back(c->header.step);
      h.bytes += c->payload.size();
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace dtrun::replica

#include "worker/job_resume.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "snapshot/peer_restores.h"
#include "snapshot/snapshot_region.h"
#include "worker/epoch_position.h"
#include "worker/replica_check.h"
#include "worker/restore_choice.h"

namespace dtrun::worker {
namespace {

// Rank 0's bytes on every rank (its size first, then the bytes).
std::string BroadcastBytes(ProcessGroupHandle& pg, const torch::Device& device, std::string bytes) {
  const torch::Device on = pg.nccl ? device : torch::Device(torch::kCPU);
  std::vector<torch::Tensor> size{torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong).to(on)};
  pg.backend->broadcast(size)->wait();
  const int64_t n = size[0].cpu().item<int64_t>();
  if (n == 0) return "";
  torch::Tensor payload = bytes.empty() ? torch::empty({n}, torch::kUInt8)
                                        : torch::from_blob(bytes.data(), {n}, torch::kUInt8).clone();
  std::vector<torch::Tensor> t{payload.to(on)};
  pg.backend->broadcast(t)->wait();
  torch::Tensor got = t[0].cpu().contiguous();
  bytes.assign(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()), static_cast<size_t>(n));
  return bytes;
}

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What this rank starts from, as exact doubles: step, epoch, batch, size and the bytes' hash.
std::vector<double> Digest(const std::optional<Progress>& p, const std::string& bytes) {
  const uint64_t h = Fnv1a(bytes);
  return {p ? double(p->global_step) : -1, p ? double(p->epoch) : -1, p ? double(p->next_batch) : -1,
          double(bytes.size()), double(h >> 32), double(h & 0xFFFFFFFFu)};
}

// Every rank's usable steps and when each was completed, by rank (a single process: its own).
struct HeldByRank {
  std::vector<std::vector<int64_t>> steps;
  std::vector<std::vector<int64_t>> completed_ms;
};
HeldByRank GatherHeld(ProcessGroupHandle* pg, const torch::Device& device,
                      const std::vector<MemorySnapshots::Usable>& usable) {
  constexpr int kMax = MemorySnapshots::kMaxSteps;
  std::vector<int64_t> mine(2 * kMax, -1);  // the steps, then their times
  for (size_t i = 0; i < usable.size() && i < kMax; ++i) {
    mine[i] = usable[i].step;
    mine[kMax + i] = usable[i].completed_ms;
  }
  std::vector<std::vector<int64_t>> all;
  if (pg == nullptr) {
    all.push_back(mine);
  } else {
    const torch::Device on = pg->nccl ? device : torch::Device(torch::kCPU);
    std::vector<torch::Tensor> in{torch::tensor(mine, torch::kInt64).to(on)};
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < pg->backend->getSize(); ++r) out[0].push_back(torch::empty_like(in[0]));
    pg->backend->allgather(out, in)->wait();
    for (const torch::Tensor& t : out[0]) {
      torch::Tensor c = t.cpu();
      all.emplace_back(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    }
  }
  HeldByRank held;
  for (const std::vector<int64_t>& r : all) {
    held.steps.emplace_back(r.begin(), r.begin() + kMax);
    held.completed_ms.emplace_back(r.begin() + kMax, r.end());
  }
  return held;
}

constexpr int kPeerHeaderTag = 28001;
constexpr int kPeerPayloadTag = 28002;

// The source's side of a peer restore: its payload's size and checksum to every receiver (size
// -1 when it cannot read its own copy), then, if every rank agrees to go on, the bytes.
bool SendPeerCopy(ProcessGroupHandle& pg, const torch::Device& device, MemorySnapshots& snapshots,
                  const SnapshotChoice& choice) {
  const torch::Device on = pg.nccl ? device : torch::Device(torch::kCPU);
  uint64_t hash = 0;
  absl::StatusOr<absl::string_view> payload = snapshots.Payload(choice.step, &hash);
  if (!payload.ok()) {
    std::fprintf(
        stderr, "warning: rank %d cannot send its in-memory snapshot of step %lld to the ranks without it: %s\n",
        pg.backend->getRank(), static_cast<long long>(choice.step), std::string(payload.status().message()).c_str());
  }
  const int64_t size = payload.ok() ? static_cast<int64_t>(payload->size()) : -1;
  std::vector<torch::Tensor> header{torch::tensor({size, static_cast<int64_t>(hash)}, torch::kInt64).to(on)};
  for (int r : choice.receivers) pg.backend->send(header, r, kPeerHeaderTag)->wait();
  if (!RanksAgree(pg, device, {1.0})) return false;
  torch::Tensor bytes = torch::from_blob(const_cast<char*>(payload->data()), {size}, torch::kUInt8).to(on);
  for (int r : choice.receivers) {
    std::vector<torch::Tensor> t{bytes};
    pg.backend->send(t, r, kPeerPayloadTag)->wait();
  }
  return true;
}

// A receiver's side: the source's copy of the step, checked (its declared size against this
// rank's slot capacity before anything is allocated, then its checksum) and restored.
absl::Status ReceivePeerCopy(ProcessGroupHandle& pg, const torch::Device& device, MemorySnapshots& snapshots,
                             const SnapshotChoice& choice, const TrainState& state) {
  const torch::Device on = pg.nccl ? device : torch::Device(torch::kCPU);
  std::vector<torch::Tensor> header{torch::empty({2}, torch::TensorOptions().dtype(torch::kInt64).device(on))};
  pg.backend->recv(header, choice.source, kPeerHeaderTag)->wait();
  torch::Tensor h = header[0].cpu();
  const int64_t size = h[0].item<int64_t>();
  const uint64_t hash = static_cast<uint64_t>(h[1].item<int64_t>());
  const absl::Status fits = CheckPeerCopySize(size, snapshots.PayloadCapacity(), choice.source);
  if (!RanksAgree(pg, device, {fits.ok() ? 1.0 : 0.0}))
    return fits.ok() ? absl::AbortedError("another rank cannot take the copy") : fits;
  std::vector<torch::Tensor> t{torch::empty({size}, torch::TensorOptions().dtype(torch::kUInt8).device(on))};
  pg.backend->recv(t, choice.source, kPeerPayloadTag)->wait();
  torch::Tensor got = t[0].cpu().contiguous();
  const absl::string_view payload(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()), static_cast<size_t>(size));
  if (snapshot::PayloadHash(payload.data(), payload.size()) != hash) {
    return absl::DataLossError(absl::StrCat("rank ", choice.source, "'s copy of step ", choice.step,
                                            " does not match its checksum after the transfer"));
  }
  DT_RETURN_IF_ERROR(snapshots.RestorePayload(payload, state));
  // Held here too, as the peers hold it; the restore stands without it.
  if (absl::Status kept = snapshots.Adopt(choice.step, payload, hash); !kept.ok()) {
    std::fprintf(stderr, "warning: rank %d restored rank %d's copy of step %lld but cannot hold it in memory: %s\n",
                 pg.backend->getRank(), choice.source, static_cast<long long>(choice.step),
                 std::string(kept.message()).c_str());
  }
  return absl::OkStatus();
}

// Restores the chosen step: each rank its own copy, and the ranks without it the source's.
absl::Status RestoreChosen(MemorySnapshots& snapshots, ProcessGroupHandle* pg, int rank, const torch::Device& device,
                           const SnapshotChoice& choice, const TrainState& state) {
  if (choice.source < 0) return snapshots.Restore(choice.step, state);
  if (choice.receives(rank)) return ReceivePeerCopy(*pg, device, snapshots, choice, state);
  if (rank == choice.source) {
    if (!SendPeerCopy(*pg, device, snapshots, choice)) return absl::AbortedError("a rank cannot take this rank's copy");
  } else if (!RanksAgree(*pg, device, {1.0})) {  // the go-ahead, which every rank takes part in
    return absl::AbortedError("a rank cannot take the source's copy");
  }
  return snapshots.Restore(choice.step, state);
}

// Restores the newest snapshot step that every rank holds, or that enough hold for the others to
// receive it (restore_choice.h). nullopt: none, or some rank could not restore it (said on stderr
// by that rank); then every rank goes to the disk path. `*changed`: this rank's state was
// overwritten by a restore the job then gave up.
std::optional<Progress> ResumeFromMemory(MemorySnapshots& snapshots, ProcessGroupHandle* pg, int rank,
                                         const torch::Device& device, const TrainState& state, bool* from_peer,
                                         bool* changed) {
  const std::vector<MemorySnapshots::Usable> usable = snapshots.UsableSnapshots();
  std::vector<int64_t> held;
  for (const MemorySnapshots::Usable& u : usable) held.push_back(u.step);
  const HeldByRank all = GatherHeld(pg, device, usable);
  const SnapshotChoice choice =
      ChooseSnapshot(all.steps, snapshot::PeerRestoresAllowed() && pg != nullptr, all.completed_ms);
  const int64_t step = choice.step;
  if (step < 0) {
    // Said by every rank that holds something: which rank lacks what is the diagnosis.
    if (!held.empty()) {
      std::fprintf(stderr, "rank %d: no in-memory snapshot step is held by every rank (this rank holds step %s); "
                   "resuming from disk\n", rank, absl::StrJoin(held, ", ").c_str());
    }
    return std::nullopt;
  }
  if (choice.completed_last && rank == 0) {
    std::fprintf(stderr,
                 "no in-memory snapshot step is held by half the ranks that hold one (as each node's "
                 "--snapshot-dir copies of a job killed everywhere at once are); taking step %lld, the snapshot "
                 "completed last\n",
                 static_cast<long long>(step));
  }
  *from_peer = choice.receives(rank);
  if (*from_peer) {
    std::fprintf(
        stderr,
        "rank %d holds no in-memory snapshot of step %lld; receiving rank %d's copy (this rank holds step %s)\n", rank,
        static_cast<long long>(step), choice.source, held.empty() ? "none" : absl::StrJoin(held, ", ").c_str());
  }
  Progress restored = *state.progress;
  TrainState into = state;
  into.progress = &restored;
  absl::Status st = RestoreChosen(snapshots, pg, rank, device, choice, into);
  if (!st.ok()) std::fprintf(stderr, "warning: rank %d cannot restore its in-memory snapshot: %s\n", rank, std::string(st.message()).c_str());
  // Every rank takes part in the comparison, whether or not it restored.
  const bool agree = pg == nullptr || RanksAgree(*pg, device, {st.ok() ? 1.0 : 0.0});
  if (!st.ok() || !agree) {
    // All or nothing per rank: a rank that failed changed nothing, but one that succeeded did.
    if (st.ok()) *changed = true;
    return std::nullopt;
  }
  return restored;
}

// The in-memory way back: the newest snapshot the ranks can restore whose restored states agree.
// A snapshot committed just before a crash may not have been compared across the replicas yet
// (worker/step_agreement.h); restored states that differ discard it and the job tries the next
// older one. `*changed`: this rank's state was overwritten by a restore the job then gave up.
std::optional<Resumed> ResumeFromMemoryAgreed(MemorySnapshots& snapshots, ProcessGroupHandle* pg, int rank,
                                              const torch::Device& device, const TrainState& state, bool* changed) {
  for (int tried = 0; tried < MemorySnapshots::kMaxSteps; ++tried) {
    bool from_peer = false;
    const std::optional<Progress> memory = ResumeFromMemory(snapshots, pg, rank, device, state, &from_peer, changed);
    if (!memory.has_value()) return std::nullopt;
    const Progress& p = *memory;
    const uint64_t h = ParameterDigest(*state.model);
    const std::vector<double> digest = {double(p.global_step), double(p.epoch), double(p.next_batch), double(h >> 32),
                                        double(h & 0xFFFFFFFFu)};
    if (pg == nullptr || RanksAgree(*pg, device, digest)) {
      snapshots.DiscardAllBut(p.global_step);
      snapshots.MarkAgreed(p.global_step);  // compared just now
      if (rank == 0) {
        // Taken in another world size (an elastic change): its position is read as a disk checkpoint's is.
        const int64_t world = from_peer ? -1 : snapshots.restored_world_size();
        const int64_t now = pg == nullptr ? 1 : pg->backend->getSize();
        const std::string taken = world > 0 && world != now ? absl::StrCat(", taken by a world of ", world, " ranks") : "";
        std::fprintf(stderr, "resuming from the in-memory snapshot of step %lld (epoch %lld, batch %lld%s)\n",
                     static_cast<long long>(p.global_step), static_cast<long long>(p.epoch),
                     static_cast<long long>(p.next_batch), taken.c_str());
      }
      return Resumed{p, from_peer ? "peer" : snapshots.restored_from_buddy() ? "buddy" : "memory"};
    }
    // Every rank learnt it from the same all-reduce, so every rank discards the same step.
    *changed = true;
    snapshots.Discard(p.global_step);
    std::fprintf(stderr,
                 "rank %d: the ranks' in-memory snapshots of step %lld differ (this rank's parameters hash to "
                 "%016llx; a crash came before the replicas compared them); going back to an older one\n",
                 rank, static_cast<long long>(p.global_step), static_cast<unsigned long long>(h));
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Resumed> ResumeJobWide(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                                      const torch::Device& device, const TrainState& state) {
  torch::nn::Module& model = *state.model;
  torch::optim::Optimizer& optimizer = *state.optimizer;
  GradScaler* scaler = state.scaler;
  bool changed = false;  // by a restored snapshot the job then gave up
  if (request.snapshots != nullptr && request.path.empty()) {
    const std::optional<Resumed> memory = ResumeFromMemoryAgreed(*request.snapshots, pg, rank, device, state, &changed);
    if (memory.has_value()) return *memory;
    request.snapshots->DiscardAllBut(-1);  // the job goes back to disk: none of these is on its path
  }
  std::optional<Progress> progress;
  std::string bytes;
  if (rank == 0) {
    if (std::optional<LoadedCheckpoint> c = LoadCheckpoint(request.dir, request.path, model, optimizer, scaler)) {
      progress = c->progress;
      bytes = std::move(c->bytes);
    }
  }
  const std::string source = progress ? "disk" : "none";
  if (pg == nullptr) return Resumed{progress, source};
  bytes = BroadcastBytes(*pg, device, std::move(bytes));
  if (rank != 0 && !bytes.empty()) {
    absl::StatusOr<Progress> p = LoadCheckpointBytes(bytes, model, optimizer, scaler);
    if (!p.ok()) {
      return absl::DataLossError(absl::StrCat("rank ", rank, " cannot load the checkpoint rank 0 chose: ",
                                              p.status().message()));
    }
    progress = *p;
  }
  // A restore the job gave up overwrote this rank's freshly built state: with no checkpoint to
  // load over it, it cannot start fresh. Compared with the rest, so every rank fails alike.
  const bool stale = bytes.empty() && changed;
  std::vector<double> digest = Digest(progress, bytes);
  digest.push_back(stale ? 1.0 : 0.0);
  if (!RanksAgree(*pg, device, digest)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ranks disagree on the state they resume from (rank ", rank, ": step ",
        progress ? progress->global_step : -1, ", ", bytes.size(), " bytes", stale ? ", a restore given up" : "",
        "); refusing to train on mismatched state"));
  }
  if (stale) {
    // Every snapshot is discarded by now, so the next attempt starts fresh.
    return absl::FailedPreconditionError(
        "the ranks restored an in-memory snapshot the job then gave up, and there is no disk checkpoint to go back "
        "to; the next attempt starts from the beginning");
  }
  if (rank != 0 && progress) {
    std::fprintf(stderr, "resuming from rank 0's checkpoint (epoch %lld, batch %lld)\n",
                 static_cast<long long>(progress->epoch), static_cast<long long>(progress->next_batch));
  }
  return Resumed{progress, progress ? "disk" : "none"};
}

absl::Status ResumeAndReport(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                             const torch::Device& device, const TrainState& state,
                             const progress::ProgressClient& reports) {
  DT_ASSIGN_OR_RETURN(Resumed resumed, ResumeJobWide(request, pg, rank, device, state));
  if (resumed.progress) *state.progress = *resumed.progress;
  reports.Restored(resumed.source, resumed.progress ? resumed.progress->global_step : -1);
  return absl::OkStatus();
}

void ContinueAtGlobalBatch(Progress& p, int64_t global_batch, int rank) {
  if (global_batch <= 0) return;
  const int64_t next = NextBatchAtGlobalBatch(p.next_batch, p.global_batch, global_batch);
  if (rank == 0 && next != p.next_batch) {
    std::fprintf(stderr,
                 "epoch %lld was saved at batch %lld of %lld samples a step; at this run's %lld samples a step it "
                 "goes on at batch %lld (no sample skipped, fewer than one step's repeated)\n",
                 static_cast<long long>(p.epoch), static_cast<long long>(p.next_batch),
                 static_cast<long long>(p.global_batch), static_cast<long long>(global_batch),
                 static_cast<long long>(next));
  }
  p.next_batch = next;
  p.global_batch = global_batch;
}

}  // namespace dtrun::worker

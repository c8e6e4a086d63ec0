#include "worker/job_resume.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "worker/replica_check.h"

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

// Restores the newest snapshot every rank holds. nullopt: none is common, or some rank could not
// restore it (said on stderr by that rank); then every rank goes to the disk path.
absl::StatusOr<std::optional<Progress>> ResumeFromMemory(MemorySnapshots& snapshots, ProcessGroupHandle* pg, int rank,
                                                         const torch::Device& device, const TrainState& state) {
  const std::vector<int64_t> held = snapshots.UsableSteps();
  const int64_t step = NewestCommonStep(pg, device, held);
  if (step < 0) {
    // Said by every rank that holds something: which rank lacks what is the diagnosis.
    if (!held.empty()) {
      std::fprintf(stderr, "rank %d: no in-memory snapshot step is held by every rank (this rank holds step %s); "
                   "resuming from disk\n", rank, absl::StrJoin(held, ", ").c_str());
    }
    return std::nullopt;
  }
  Progress restored = *state.progress;
  TrainState into = state;
  into.progress = &restored;
  absl::Status st = snapshots.Restore(step, into);
  if (!st.ok()) std::fprintf(stderr, "warning: rank %d cannot restore its in-memory snapshot: %s\n", rank, std::string(st.message()).c_str());
  // Every rank takes part in the comparison, whether or not it restored.
  const bool agree = pg == nullptr || RanksAgree(*pg, device, {st.ok() ? 1.0 : 0.0});
  const bool everyone = st.ok() && agree;
  if (!everyone) {
    // All or nothing per rank: a rank that failed changed nothing, but one that succeeded did, and
    // the disk path below only overwrites it when there is a checkpoint.
    if (st.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " restored the in-memory snapshot of step ", step,
          " but another rank could not; restart the job (its newest disk checkpoint is then used)"));
    }
    return std::nullopt;
  }
  snapshots.DiscardAllBut(step);
  return restored;
}

}  // namespace

int64_t NewestCommonStep(ProcessGroupHandle* pg, const torch::Device& device, const std::vector<int64_t>& steps) {
  std::vector<int64_t> mine(steps.begin(), steps.begin() + std::min<size_t>(steps.size(), MemorySnapshots::kMaxSteps));
  mine.resize(MemorySnapshots::kMaxSteps, -1);
  if (pg == nullptr) return *std::max_element(mine.begin(), mine.end());
  const torch::Device on = pg->nccl ? device : torch::Device(torch::kCPU);
  std::vector<torch::Tensor> in{torch::tensor(mine, torch::kInt64).to(on)};
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < pg->backend->getSize(); ++r) out[0].push_back(torch::empty_like(in[0]));
  pg->backend->allgather(out, in)->wait();
  std::vector<std::vector<int64_t>> all;
  for (const torch::Tensor& t : out[0]) {
    torch::Tensor c = t.cpu();
    all.emplace_back(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }
  int64_t best = -1;
  for (int64_t candidate : all[0]) {
    if (candidate <= best) continue;
    bool everywhere = std::all_of(all.begin(), all.end(), [&](const std::vector<int64_t>& held) {
      return std::find(held.begin(), held.end(), candidate) != held.end();
    });
    if (everywhere) best = candidate;
  }
  return best;
}

absl::StatusOr<Resumed> ResumeJobWide(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                                      const torch::Device& device, const TrainState& state) {
  torch::nn::Module& model = *state.model;
  torch::optim::Optimizer& optimizer = *state.optimizer;
  GradScaler* scaler = state.scaler;
  if (request.snapshots != nullptr && request.path.empty()) {
    DT_ASSIGN_OR_RETURN(std::optional<Progress> memory, ResumeFromMemory(*request.snapshots, pg, rank, device, state));
    if (memory.has_value()) {
      const Progress& p = *memory;
      const uint64_t h = ParameterDigest(model);
      const std::vector<double> digest = {double(p.global_step), double(p.epoch), double(p.next_batch),
                                          double(h >> 32), double(h & 0xFFFFFFFFu)};
      if (pg != nullptr && !RanksAgree(*pg, device, digest)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the ranks' in-memory snapshots of step ", p.global_step,
            " differ (rank ", rank, "'s parameters hash to ", h, "); refusing to train on mismatched state"));
      }
      if (rank == 0) {
        std::fprintf(stderr, "resuming from the in-memory snapshot of step %lld (epoch %lld, batch %lld)\n",
                     static_cast<long long>(p.global_step), static_cast<long long>(p.epoch),
                     static_cast<long long>(p.next_batch));
      }
      return Resumed{p, request.snapshots->restored_from_buddy() ? "buddy" : "memory"};
    }
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
  if (!RanksAgree(*pg, device, Digest(progress, bytes))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ranks disagree on the state they resume from (rank ", rank, ": step ",
        progress ? progress->global_step : -1, ", ", bytes.size(), " bytes); refusing to train on mismatched state"));
  }
  if (rank != 0 && progress) {
    std::fprintf(stderr, "resuming from rank 0's checkpoint (epoch %lld, batch %lld)\n",
                 static_cast<long long>(progress->epoch), static_cast<long long>(progress->next_batch));
  }
  return Resumed{progress, progress ? "disk" : "none"};
}

}  // namespace dtrun::worker

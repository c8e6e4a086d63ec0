#include "worker/job_resume.h"

#include <cstring>

#include "absl/strings/str_cat.h"

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

// Max and -min of each digest entry over all ranks: equal everywhere iff max == min.
bool RanksAgree(ProcessGroupHandle& pg, const torch::Device& device, const std::vector<double>& digest) {
  std::vector<double> both(digest);
  for (double d : digest) both.push_back(-d);
  std::vector<torch::Tensor> t{torch::tensor(both, torch::kFloat64).to(pg.nccl ? device : torch::Device(torch::kCPU))};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  pg.backend->allreduce(t, max)->wait();
  torch::Tensor r = t[0].cpu();
  for (size_t i = 0; i < digest.size(); ++i) {
    if (r[int64_t(i)].item<double>() != -r[int64_t(i + digest.size())].item<double>()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::optional<Progress>> ResumeJobWide(const ResumeRequest& request, ProcessGroupHandle* pg, int rank,
                                                      const torch::Device& device, torch::nn::Module& model,
                                                      torch::optim::Optimizer& optimizer, GradScaler* scaler) {
  std::optional<Progress> progress;
  std::string bytes;
  if (rank == 0) {
    if (std::optional<LoadedCheckpoint> c = LoadCheckpoint(request.dir, request.path, model, optimizer, scaler)) {
      progress = c->progress;
      bytes = std::move(c->bytes);
    }
  }
  if (pg == nullptr) return progress;
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
  return progress;
}

}  // namespace dtrun::worker

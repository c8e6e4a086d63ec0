#include "worker/replica_check.h"

#include <algorithm>
#include <cstdio>

#include "snapshot/payload_toc.h"

namespace dtrun::worker {

uint64_t ReplicaFingerprint(const TrainState& state) {
  snapshot::PayloadHasher hasher;
  torch::NoGradGuard no_grad;
  for (const StateTensor& t : StateTensors(state)) {
    if (!t.changes_only_in_optimizer_step) continue;  // buffers (BN statistics) are per rank
    const torch::Tensor c = t.tensor.detach().to(torch::kCPU).contiguous();
    hasher.Update(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return hasher.Digest();
}

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

namespace {

// Halves of 32 bits: exact in a double.
double High(uint64_t v) { return static_cast<double>(v >> 32); }
double Low(uint64_t v) { return static_cast<double>(v & 0xFFFFFFFFu); }

}  // namespace

ReplicaVote CompareReplicas(ProcessGroupHandle& pg, const torch::Device& device, uint64_t mine, int rank, int world,
                            std::vector<uint64_t>& by_rank) {
  if (RanksAgree(pg, device, {High(mine), Low(mine)})) return ReplicaVote{};
  // Rare: every rank's fingerprint, each in its own two slots of one sum.
  std::vector<double> slots(2 * static_cast<size_t>(world), 0.0);
  slots[2 * rank] = High(mine);
  slots[2 * rank + 1] = Low(mine);
  std::vector<torch::Tensor> t{torch::tensor(slots, torch::kFloat64).to(pg.nccl ? device : torch::Device(torch::kCPU))};
  pg.backend->allreduce(t)->wait();
  torch::Tensor all = t[0].cpu();
  by_rank.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    by_rank[r] = (static_cast<uint64_t>(all[2 * r].item<double>()) << 32) | static_cast<uint64_t>(all[2 * r + 1].item<double>());
  }
  return VoteOnFingerprints(by_rank);
}

void EnsureReplicasAgree(ProcessGroupHandle* pg, const torch::Device& device, const TrainState& state, int rank,
                         int world, int64_t step, const progress::ProgressClient& reports) {
  if (pg == nullptr || world < 2) return;
  std::vector<uint64_t> by_rank;
  const uint64_t mine = ReplicaFingerprint(state);
  const ReplicaVote vote = CompareReplicas(*pg, device, mine, rank, world, by_rank);
  if (vote.agreed) return;
  const bool differs = std::find(vote.differing.begin(), vote.differing.end(), rank) != vote.differing.end();
  if (differs) reports.Diverged(step, FingerprintHex(mine), vote.majority ? FingerprintHex(*vote.majority) : "none");
  const std::string line = DescribeDivergence(vote, by_rank, step);
  if (rank == 0 || differs) std::fprintf(stderr, "rank %d: %s; going back to the newest state they agreed on\n", rank, line.c_str());
  throw ReplicasDiverged(line);
}

}  // namespace dtrun::worker

#include "worker/replica_check.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_join.h"
#include "snapshot/payload_toc.h"

namespace dtrun::worker {

bool RanksAgree(ProcessGroupHandle& pg, const torch::Device& device, const std::vector<double>& digest) {
  std::vector<double> both(digest);
  for (double d : digest) both.push_back(-d);
  const torch::Tensor t = torch::tensor(both, torch::kFloat64).to(pg.nccl ? device : torch::Device(torch::kCPU));
  StartAllReduceMax(pg, t)->wait();
  torch::Tensor r = t.cpu();
  for (size_t i = 0; i < digest.size(); ++i) {
    if (r[int64_t(i)].item<double>() != -r[int64_t(i + digest.size())].item<double>()) return false;
  }
  return true;
}

namespace {

// Every rank's `mine` (each the same length), rank by rank: each rank fills its own slots of one
// sum. Rare paths only (a disagreement found): it moves world × mine.size() numbers.
std::vector<double> GatherByRank(ProcessGroupHandle& pg, const torch::Device& device, const std::vector<double>& mine,
                                 int rank, int world) {
  std::vector<double> slots(mine.size() * static_cast<size_t>(world), 0.0);
  std::copy(mine.begin(), mine.end(), slots.begin() + static_cast<std::ptrdiff_t>(mine.size() * rank));
  std::vector<torch::Tensor> t{torch::tensor(slots, torch::kFloat64).to(pg.nccl ? device : torch::Device(torch::kCPU))};
  pg.backend->allreduce(t)->wait();
  const torch::Tensor all = t[0].cpu().contiguous();
  const double* p = all.data_ptr<double>();
  return std::vector<double>(p, p + slots.size());
}

// Halves of 32 bits: exact in a double.
double High(uint64_t v) { return static_cast<double>(v >> 32); }
double Low(uint64_t v) { return static_cast<double>(v & 0xFFFFFFFFu); }

}  // namespace

ReplicaVote CompareReplicas(ProcessGroupHandle& pg, const torch::Device& device, uint64_t mine, int rank, int world,
                            std::vector<uint64_t>& by_rank) {
  if (RanksAgree(pg, device, {High(mine), Low(mine)})) return ReplicaVote{};
  const std::vector<double> all = GatherByRank(pg, device, {High(mine), Low(mine)}, rank, world);
  by_rank.assign(static_cast<size_t>(world), 0);
  for (int r = 0; r < world; ++r) {
    by_rank[r] = (static_cast<uint64_t>(all[2 * r]) << 32) | static_cast<uint64_t>(all[2 * r + 1]);
  }
  return VoteOnFingerprints(by_rank);
}

void EnsureFingerprintsAgree(ProcessGroupHandle* pg, const torch::Device& device, uint64_t mine, int rank, int world,
                             int64_t step, const progress::ProgressClient& reports) {
  if (pg == nullptr || world < 2) return;
  std::vector<uint64_t> by_rank;
  const ReplicaVote vote = CompareReplicas(*pg, device, mine, rank, world, by_rank);
  if (vote.agreed) return;
  const bool differs = std::find(vote.differing.begin(), vote.differing.end(), rank) != vote.differing.end();
  if (differs) reports.Diverged(step, FingerprintHex(mine), vote.majority ? FingerprintHex(*vote.majority) : "none");
  const std::string line = DescribeDivergence(vote, by_rank, step);
  if (rank == 0 || differs) std::fprintf(stderr, "rank %d: %s; going back to the newest state they agreed on\n", rank, line.c_str());
  throw ReplicasDiverged(line);
}

void ThrowLossNotFiniteOnSomeRanks(ProcessGroupHandle& pg, const torch::Device& device, bool mine_finite, int rank,
                                   int world, int64_t step) {
  const std::vector<double> all = GatherByRank(pg, device, {mine_finite ? 0.0 : 1.0}, rank, world);
  std::vector<std::string> who;
  for (int r = 0; r < world; ++r) {
    if (all[r] > 0.5) who.push_back(std::to_string(r));
  }
  const std::string line = "the loss of step " + std::to_string(step) + " is not finite on rank(s) " +
                           absl::StrJoin(who, ", ") + " only, finite on the other " +
                           std::to_string(world - static_cast<int>(who.size())) +
                           ": silent corruption or a bad input on those ranks";
  if (rank == 0 || !mine_finite) std::fprintf(stderr, "rank %d: %s; going back to the newest state they agreed on\n", rank, line.c_str());
  throw ReplicasDiverged(line);
}

}  // namespace dtrun::worker

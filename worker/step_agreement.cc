#include "worker/step_agreement.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/env_names.h"
#include "worker/replica_check.h"

namespace dtrun::worker {

bool StepVotesLagged(bool by_default) {
  const char* v = std::getenv(env::kStepVote);
  if (v == nullptr || *v == '\0') return by_default;
  if (std::strcmp(v, "lagged") == 0) return true;
  if (std::strcmp(v, "at-once") == 0) return false;
  std::fprintf(stderr, "warning: %s=%s is neither \"lagged\" nor \"at-once\"; the vote is read %s\n", env::kStepVote, v,
               by_default ? "a step later" : "at once");
  return by_default;
}

StepAgreement::StepAgreement(ProcessGroupHandle* pg, const torch::Device& device, int rank, int world,
                             const progress::ProgressClient& reports, CollectiveWatchdog* watchdog,
                             MemorySnapshots* snapshots)
    : pg_(pg),
      device_(device),
      rank_(rank),
      world_(world),
      reports_(reports),
      watchdog_(watchdog),
      snapshots_(snapshots) {
  if (snapshots_) {
    snapshots_->SetVerifier([this](uint64_t fingerprint, int64_t step) { Expect(step, fingerprint); });
    snapshots_->SetReports(&reports_);
    rescue_on_stop_.emplace([snapshots] { snapshots->Rescue(); });
  }
}

torch::Device StepAgreement::CollectiveDevice() const { return pg_->nccl ? device_ : torch::Device(torch::kCPU); }

StepVotes StepAgreement::AllReduceMax(const StepVotes& votes) {
  CollectiveWatchdog::Scope guard(watchdog_, "the all-reduce that ends a step (what next, and the replica check)");
  const torch::Tensor t =
      torch::tensor(std::vector<double>(votes.begin(), votes.end()), torch::kFloat64).to(CollectiveDevice());
  StartAllReduceMax(*pg_, t)->wait();
  const torch::Tensor got = t.cpu().contiguous();
  StepVotes maxed;
  std::copy(got.data_ptr<double>(), got.data_ptr<double>() + maxed.size(), maxed.begin());
  return maxed;
}

StepVerdict StepAgreement::Decide(const StepWishes& mine, int64_t step) {
  const StepVotes votes = EncodeStepVotes(mine, pending_);
  if (Alone()) return DecodeStepVotes(votes);
  const StepVerdict verdict = DecodeStepVotes(AllReduceMax(votes));
  std::optional<PendingCheck> pending = std::exchange(pending_, std::nullopt);
  Settle(verdict, mine, step, pending, std::exchange(kept_, {}));
  return verdict;
}

void StepAgreement::Propose(const StepWishes& mine, int64_t step) {
  if (proposal_) TakeVerdict();  // one in flight at most: the checks settle in order
  Proposal p;
  p.mine = mine;
  p.step = step;
  const StepVotes votes = EncodeStepVotes(mine, pending_);
  if (Alone()) {
    p.alone = DecodeStepVotes(votes);
    proposal_ = std::move(p);
    return;
  }
  p.pending = std::exchange(pending_, std::nullopt);
  p.kept = std::exchange(kept_, {});
  // Filled by kernels: a tensor made on the host and copied to the GPU would make the host wait
  // for everything queued before it.
  p.votes = torch::empty({static_cast<int64_t>(votes.size())},
                         torch::TensorOptions().dtype(torch::kFloat64).device(CollectiveDevice()));
  for (size_t i = 0; i < votes.size(); ++i) p.votes.narrow(0, static_cast<int64_t>(i), 1).fill_(votes[i]);
  p.work = StartAllReduceMax(*pg_, p.votes);
  if (p.votes.is_cuda()) {
    // NCCL: wait() only orders the current stream after the all-reduce. The copy queued behind
    // it is read in TakeVerdict, once the next step is queued too.
    p.work->wait();
    readback_.Push(p.votes, step);
    p.read_behind = true;
  }
  proposal_ = std::move(p);
}

std::optional<StepVerdict> StepAgreement::TakeVerdict() {
  if (!proposal_) return std::nullopt;
  Proposal p = std::move(*proposal_);
  proposal_.reset();
  if (p.alone) return p.alone;
  StepVotes maxed;
  {
    CollectiveWatchdog::Scope guard(watchdog_,
                                    "the all-reduce that ended the step before (what next, and the replica check)");
    if (!p.read_behind) {
      p.work->wait();  // Gloo: run on its own thread meanwhile
      readback_.Push(p.votes, p.step);
    }
    const std::vector<LaggedReadback::Values> read = readback_.Take(/*all=*/true);
    std::copy(read.back().values.begin(), read.back().values.begin() + maxed.size(), maxed.begin());
  }
  const StepVerdict verdict = DecodeStepVotes(maxed);
  Settle(verdict, p.mine, p.step, p.pending, std::move(p.kept));
  return verdict;
}

void StepAgreement::Settle(const StepVerdict& verdict, const StepWishes& mine, int64_t step,
                           std::optional<PendingCheck> pending, std::vector<Kept> kept) {
  if (verdict.loss_not_finite_somewhere && !verdict.loss_not_finite_everywhere) {
    // Those ranks cannot be trusted since some step before this one, maybe since before the
    // state kept last: the way back must not be that snapshot.
    DiscardKept(kept);
    ThrowLossNotFiniteOnSomeRanks(*pg_, device_, mine.loss_finite, rank_, world_, step);
  }
  if (!verdict.pending_agreed) Diverged(pending, kept);
  if (pending) {
    ++riding_;
    Agreed(kept);
  } else {
    kept_.insert(kept_.begin(), kept.begin(), kept.end());  // nothing compared yet: the next vote
  }
}

void StepAgreement::Expect(int64_t step, uint64_t fingerprint) {
  // Every rank keeps the same states in the same order, so combined fingerprints compare too.
  if (pending_) fingerprint ^= pending_->fingerprint * 1099511628211ull;
  pending_ = PendingCheck{step, fingerprint};
}

void StepAgreement::Snapshot(const TrainState& state, int64_t epoch, int64_t next_batch) {
  if (snapshots_ == nullptr) {
    // Another rank snapshots: this one is compared all the same.
    if (!Alone()) Expect(state.progress->global_step, ReplicaFingerprint(state));
    return;
  }
  state.progress->epoch = epoch;
  state.progress->next_batch = next_batch;
  // A snapshot that cannot be taken still gives its fingerprint (MemorySnapshots::Begin).
  if (absl::Status st = snapshots_->Begin(state); !st.ok()) {
    std::fprintf(stderr, "warning: rank %d: in-memory snapshot of step %lld not taken: %s\n", rank_,
                 static_cast<long long>(state.progress->global_step), std::string(st.message()).c_str());
    return;
  }
  if (!snapshots_->copying()) CommitAndKeep();
}

void StepAgreement::FinishSnapshot() {
  if (!snapshots_) return;
  snapshots_->Disarm();
  CommitAndKeep();
}

void StepAgreement::FinishSnapshotBeforeDeviceStep() {
  if (!snapshots_) return;
  snapshots_->Disarm();
  if (Alone() && snapshots_->OrderAfterCopies() && !snapshots_->copy_done()) return;
  CommitAndKeep();
}

void StepAgreement::Arm(const TrainState& state, int64_t epoch, int64_t next_batch) {
  if (!snapshots_) return;
  state.progress->epoch = epoch;
  state.progress->next_batch = next_batch;
  snapshots_->Arm(state);
}

StepAgreement::~StepAgreement() {
  if (snapshots_ && std::uncaught_exceptions() > 0) snapshots_->Rescue();
}

void StepAgreement::CommitAndKeep() {
  if (!snapshots_->Finish()) return;
  kept_.push_back(
      Kept{snapshots_->last_step(), static_cast<int64_t>(snapshots_->last_bytes()),
           static_cast<int64_t>((snapshots_->last_write_seconds() + snapshots_->last_background_seconds()) * 1e6)});
  if (Alone()) {
    Agreed(std::exchange(kept_, {}));
    pending_.reset();
  }
}

void StepAgreement::SnapshotAndCompare(const TrainState& state, int64_t epoch, int64_t next_batch) {
  TakeVerdict();  // a vote in flight settles its checks first (its wishes come again next step)
  FinishSnapshot();
  Snapshot(state, epoch, next_batch);
  FinishSnapshot();
  if (Alone()) return;
  const auto start = std::chrono::steady_clock::now();
  std::optional<PendingCheck> pending = std::exchange(pending_, std::nullopt);
  std::vector<Kept> kept = std::exchange(kept_, {});
  if (!DecodeStepVotes(AllReduceMax(EncodeStepVotes(StepWishes{}, pending))).pending_agreed) Diverged(pending, kept);
  Agreed(kept);
  ++apart_;
  apart_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void StepAgreement::Agreed(const std::vector<Kept>& kept) {
  for (const Kept& k : kept) {
    reports_.Snapshot(k.step, k.bytes, k.cost_us);
    snapshots_->MarkAgreed(k.step);
  }
}

void StepAgreement::DiscardKept(const std::vector<Kept>& kept) {
  if (snapshots_) {
    snapshots_->Disarm();  // a state the replicas may not agree on
    for (const Kept& k : kept) snapshots_->Discard(k.step);
    for (const Kept& k : kept_) snapshots_->Discard(k.step);  // kept since: no better
  }
  kept_.clear();
  pending_.reset();
}

void StepAgreement::Diverged(const std::optional<PendingCheck>& pending, const std::vector<Kept>& kept) {
  const PendingCheck mine = pending.value_or(PendingCheck{-1, 0});
  DiscardKept(kept);
  // Names the ranks and throws when the fingerprints differ.
  EnsureFingerprintsAgree(pg_, device_, mine.fingerprint, rank_, world_, mine.step, reports_);
  const std::string line = absl::StrCat("the ranks kept different steps before step ", mine.step,
                                        " (a trainer that does not snapshot on every rank alike)");
  if (rank_ == 0) std::fprintf(stderr, "rank %d: %s\n", rank_, line.c_str());
  throw ReplicasDiverged(line);
}

std::string StepAgreement::Summary() const {
  if (riding_ + apart_ == 0) return "";
  std::string s = absl::StrFormat("replica checks: %d in the steps' all-reduce", riding_);
  if (apart_ > 0) absl::StrAppendFormat(&s, ", %d apart (%.1f ms each)", apart_, 1e3 * apart_s_ / apart_);
  return s;
}

}  // namespace dtrun::worker

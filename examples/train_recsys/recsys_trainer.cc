#include "examples/train_recsys/recsys_trainer.h"

#include <string.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "examples/train_recsys/embedding_grad_sync.h"
#include "examples/train_recsys/ncf_model.h"
#include "progress/progress_client.h"
#include "worker/blas_check.h"
#include "worker/checkpoint.h"
#include "worker/collective_watchdog.h"
#include "worker/crash_report.h"
#include "worker/data/ratings.h"
#include "worker/ddp.h"
#include "worker/dist_env.h"
#include "worker/error_record.h"
#include "worker/exception_text.h"
#include "worker/job_resume.h"
#include "worker/lazy_adam.h"
#include "worker/memory_snapshot.h"
#include "worker/metrics_log.h"
#include "worker/parameter_faults.h"
#include "worker/process_group.h"
#include "worker/rank_zero_log.h"
#include "worker/replica_check.h"
#include "worker/step_agreement.h"
#include "worker/stop_signal.h"
#include "worker/tensorboard.h"
#include "worker/train_state.h"
#include "worker/warm_start.h"

namespace dtrun::recsys {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kProgram[] = "train_recsys";  // its errors' prefix
// From about here lazy Adam is ahead of Adam (1.2-1.4x at 102,260 rows, docs/BENCHMARKS.md).
constexpr int64_t kLazyAdamHintRows = 100'000;
using worker::CollectiveWatchdog;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

torch::Tensor Int64s(const std::vector<int64_t>& v) {
  return torch::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kInt64).clone();
}

// One training step's examples: the batch's ratings first, then `negatives` unrated-by-assumption
// items per rating (uniform over the catalogue, as NCF samples them; a rare rated one is noise).
struct StepBatch {
  torch::Tensor users, items;  // [B·(1+k)]
  torch::Tensor ratings;       // [B]
  torch::Tensor labels;        // [B·(1+k)]: 1 for the ratings, 0 for the negatives
  int64_t count = 0;           // B
};

// The held-out evaluation this rank does: its share of the test ratings, and of the users whose
// latest rating is hidden among sampled unrated items.
struct EvalShard {
  torch::Tensor test_users, test_items, test_ratings;
  torch::Tensor rank_users, rank_items;  // candidates, the held-out item first in each group
  std::vector<int64_t> group_sizes;
};

class RecsysTraining {
 public:
  // `table`: the ratings, read before the round is known (a parked worker reads them before it parks).
  RecsysTraining(const RecsysOptions& o, worker::DistEnv env, data::RatingsTable table)
      : o_(o), env_(std::move(env)), table_(std::move(table)) {}
  int Run();

 private:
  bool Setup();
  // Setup's phases; the bool ones report a fatal error and return false.
  bool TakeSplit(const data::RatingsTable& table, data::RatingsSplit& split);
  void BuildModelAndOptimizer(const data::RatingsTable& table);
  bool PrepareResume();
  void SetUpDdp();
  void OpenOutputs();
  void SayWhatRuns(size_t test_ratings, int64_t table_rows);
  void BuildEvalShard(const data::RatingsTable& table, const data::RatingsSplit& split);
  StepBatch MakeBatch(const std::vector<int64_t>& order, int64_t epoch, int64_t step) const;
  std::vector<int64_t> EpochOrder(int64_t epoch) const;
  const char* OptimizerName() const { return o_.lazy_adam ? "lazy Adam" : "Adam"; }
  void TrainEpoch(int64_t epoch, int64_t first_step);
  double Evaluate(int64_t epoch);  // returns HR@10 in percent
  void Save(int64_t epoch, int64_t next_step);
  bool BenchStep();
  std::vector<double> AllReduceSum(std::vector<double> v);

  RecsysOptions o_;
  worker::DistEnv env_;
  worker::RankZeroLog log_{env_.rank};
  std::optional<worker::ProcessGroupHandle> pg_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::vector<data::Rating> train_;
  int32_t num_items_ = 0;
  double train_mean_ = 0;
  EvalShard eval_;
  int64_t steps_per_epoch_ = 0;
  Ncf model_{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer_;
  std::unique_ptr<worker::DistributedDataParallel> ddp_;
  std::unique_ptr<EmbeddingGradSync> table_sync_;
  worker::Progress progress_;
  progress::ProgressClient reports_;
  std::unique_ptr<worker::MemorySnapshots> snapshots_;  // held by the dtrun agent; null elsewhere
  worker::FaultPlan faults_ = worker::FaultPlan::FromEnvironment(env_.rank, env_.restart_count);  // test-only (DTRUN_FAULT_*)
  // What the ranks decide after each step, and the replica check of every kept state.
  std::optional<worker::StepAgreement> agreement_;
  std::optional<data::RatingsTable> table_;              // until Setup has used it
  worker::TrainState State() { return {model_.ptr().get(), optimizer_.get(), nullptr, &progress_}; }
  worker::MetricsLog metrics_;
  std::unique_ptr<worker::EventWriter> tb_;
  Clock::time_point last_save_ = Clock::now();
  bool stop_ = false;
  int64_t bench_steps_ = 0;
  Clock::time_point bench_start_;
};

std::vector<double> RecsysTraining::AllReduceSum(std::vector<double> v) {
  if (!pg_) return v;
  CollectiveWatchdog::Scope guard(watchdog_.get(), "an all-reduce of training statistics");
  std::vector<torch::Tensor> t{torch::tensor(v, torch::kFloat64)};
  pg_->backend->allreduce(t)->wait();
  for (size_t i = 0; i < v.size(); ++i) v[i] = t[0][static_cast<int64_t>(i)].item<double>();
  return v;
}

void RecsysTraining::BuildEvalShard(const data::RatingsTable& table, const data::RatingsSplit& split) {
  std::vector<int64_t> users, items;
  std::vector<float> ratings;
  for (size_t i = static_cast<size_t>(env_.rank); i < split.test.size(); i += static_cast<size_t>(env_.world_size)) {
    users.push_back(split.test[i].user);
    items.push_back(split.test[i].item);
    ratings.push_back(split.test[i].rating);
  }
  eval_.test_users = Int64s(users);
  eval_.test_items = Int64s(items);
  eval_.test_ratings = torch::tensor(ratings, torch::kFloat32);
  const std::vector<std::vector<int32_t>> rated = data::RatedItemsByUser(table);
  users.clear();
  items.clear();
  for (size_t i = static_cast<size_t>(env_.rank); i < split.ranking_target.size();
       i += static_cast<size_t>(env_.world_size)) {
    const data::Rating& target = split.ranking_target[i];
    std::vector<int32_t> negatives =
        data::SampleUnratedItems(target.user, rated[target.user], table.num_items(), o_.eval_negatives, o_.seed);
    if (negatives.empty()) continue;  // the user rated everything: nothing to rank against
    users.insert(users.end(), negatives.size() + 1, target.user);
    items.push_back(target.item);
    items.insert(items.end(), negatives.begin(), negatives.end());
    eval_.group_sizes.push_back(static_cast<int64_t>(negatives.size()) + 1);
  }
  eval_.rank_users = Int64s(users);
  eval_.rank_items = Int64s(items);
}

bool RecsysTraining::Setup() {
  if (o_.threads > 0) torch::set_num_threads(o_.threads);
  torch::manual_seed(o_.seed);
  // Every rank reads the file: the same bytes give the same ids, split and order everywhere.
  std::optional<data::RatingsTable> table = std::exchange(table_, std::nullopt);
  log_.Print("=> %s", table->Summary(o_.ratings).c_str());
  data::RatingsSplit split = data::SplitByTime(*table, o_.test_fraction);
  if (!TakeSplit(*table, split)) return false;
  if (env_.distributed()) {
    pg_ = worker::InitProcessGroup(env_, std::chrono::minutes(30), /*cuda=*/false);
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        std::chrono::milliseconds(static_cast<int64_t>(o_.collective_timeout_s * 1000)), env_.rank);
  }
  BuildModelAndOptimizer(*table);
  if (!PrepareResume()) return false;
  worker::ContinueAtGlobalBatch(progress_, int64_t{o_.batch_size} * env_.world_size, env_.rank);
  SetUpDdp();
  if (env_.rank == 0) OpenOutputs();
  SayWhatRuns(split.test.size(), int64_t{table->num_users()} + table->num_items());
  return true;
}

bool RecsysTraining::TakeSplit(const data::RatingsTable& table, data::RatingsSplit& split) {
  train_ = std::move(split.train);
  num_items_ = table.num_items();
  steps_per_epoch_ = static_cast<int64_t>(train_.size()) / env_.world_size / o_.batch_size;
  if (steps_per_epoch_ < 1) {
    worker::ReportFatalError(kProgram, absl::StrCat(o_.ratings, ": ", train_.size(),
                                                    " training ratings are fewer than one batch "
                                                    "on each of ",
                                                    env_.world_size, " processes (-b ", o_.batch_size,
                                                    "); use a smaller -b or more ratings"));
    return false;
  }
  double sum = 0;
  for (const data::Rating& r : train_) sum += r.rating;
  train_mean_ = sum / static_cast<double>(train_.size());
  BuildEvalShard(table, split);
  return true;
}

void RecsysTraining::BuildModelAndOptimizer(const data::RatingsTable& table) {
  NcfOptions mo;
  mo.users = table.num_users();
  mo.items = table.num_items();
  mo.dim = o_.dim;
  mo.hidden = o_.hidden;
  mo.sparse_gradients = (o_.embedding_sync == EmbeddingSync::kSparse && pg_.has_value()) || o_.lazy_adam;
  mo.global_mean = static_cast<float>(train_mean_);
  model_ = Ncf(mo);
  const auto adam = torch::optim::AdamOptions(o_.lr).weight_decay(o_.weight_decay);
  if (o_.lazy_adam) {
    optimizer_ = std::make_unique<worker::LazyAdam>(model_->parameters(), adam);
  } else {
    optimizer_ = std::make_unique<torch::optim::Adam>(model_->parameters(), adam);
  }
}

// The checkpoint directory checked, the in-memory snapshots opened, and the state every rank
// resumes from restored (worker/job_resume.h). A benchmark starts fresh.
bool RecsysTraining::PrepareResume() {
  if (env_.rank == 0 && o_.timed_iters <= 0) {
    if (absl::Status st = worker::PrepareCheckpointDir(o_.output_dir + "/checkpoints"); !st.ok()) {
      worker::ReportFatalError(kProgram, st.message());
      return false;
    }
  }
  if (o_.timed_iters <= 0) snapshots_ = worker::MemorySnapshots::FromEnvironment(env_);
  agreement_.emplace(pg_ ? &*pg_ : nullptr, torch::kCPU, env_.rank, env_.world_size, reports_, watchdog_.get(),
                     snapshots_.get());
  if (o_.timed_iters > 0) return true;
  CollectiveWatchdog::Scope guard(watchdog_.get(), "the resume decision");
  const absl::Status resumed =
      worker::ResumeAndReport(worker::ResumeRequest{o_.output_dir + "/checkpoints", o_.resume, snapshots_.get()},
                              pg_ ? &*pg_ : nullptr, env_.rank, torch::kCPU, State(), reports_);
  if (!resumed.ok()) worker::ReportFatalError(kProgram, resumed.message());
  return resumed.ok();
}

void RecsysTraining::SetUpDdp() {
  if (!pg_) return;
  worker::DdpOptions d;
  d.broadcast_buffers = false;
  d.overlap = false;  // CPU: the all-reduce would compete with the compute threads
  d.watchdog = watchdog_.get();
  ddp_ = std::make_unique<worker::DistributedDataParallel>(model_->towers().ptr(), *pg_, env_.world_size, d);
  table_sync_ = std::make_unique<EmbeddingGradSync>(model_->tables()->parameters(), *pg_, env_.world_size,
                                                    o_.embedding_sync, watchdog_.get(),
                                                    /*sparse_result=*/o_.lazy_adam);
}

// Rank 0's metrics log and TensorBoard events.
void RecsysTraining::OpenOutputs() {
  metrics_.StartRun(o_.output_dir, progress_.epoch, progress_.global_step);
  if (o_.tensorboard) tb_ = std::make_unique<worker::EventWriter>(o_.output_dir + "/tb");
}

// What runs, and what would make it faster: an optimised BLAS, --lazy-adam for large tables.
void RecsysTraining::SayWhatRuns(size_t test_ratings, int64_t table_rows) {
  log_.Print(
      "=> NCF dim %lld, %zu train / %zu test ratings, world size %d, batch %d per process, %lld steps per epoch, "
      "%s embedding gradients, %s",
      static_cast<long long>(o_.dim), train_.size(), test_ratings, env_.world_size, o_.batch_size,
      static_cast<long long>(steps_per_epoch_), EmbeddingSyncName(o_.embedding_sync), OptimizerName());
  if (const std::string slow_blas = worker::SlowBlasWarning(); !slow_blas.empty()) {
    log_.Print("%s", slow_blas.c_str());
  }
  if (!o_.lazy_adam && table_rows >= kLazyAdamHintRows) {
    log_.Print(
        "=> hint: Adam updates all %lld table rows every step; --lazy-adam updates only the rows a step used "
        "(33x faster at 850,000 rows, docs/BENCHMARKS.md)",
        static_cast<long long>(table_rows));
  }
}

// The epoch's permutation of the training ratings, this rank's share of it (strided, as
// DistributedSampler), whole batches only: every rank takes the same number of steps.
std::vector<int64_t> RecsysTraining::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> all(train_.size());
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(o_.seed * 1000003 + static_cast<uint64_t>(epoch));
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(steps_per_epoch_ * o_.batch_size));
  for (int64_t i = env_.rank; static_cast<int64_t>(mine.size()) < steps_per_epoch_ * o_.batch_size; i += env_.world_size) {
    mine.push_back(all[static_cast<size_t>(i)]);
  }
  return mine;
}

StepBatch RecsysTraining::MakeBatch(const std::vector<int64_t>& order, int64_t epoch, int64_t step) const {
  const int64_t b = o_.batch_size, k = o_.negatives;
  std::vector<int64_t> users(static_cast<size_t>(b * (1 + k))), items(users.size());
  std::vector<float> ratings(static_cast<size_t>(b));
  // Negatives depend on (seed, epoch, step, rank) only: a resumed run draws the same ones.
  std::mt19937_64 rng((o_.seed * 1000003 + static_cast<uint64_t>(epoch)) * 1000003 +
                      static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(env_.rank));
  std::uniform_int_distribution<int64_t> any_item(0, num_items_ - 1);
  for (int64_t i = 0; i < b; ++i) {
    const data::Rating& r = train_[static_cast<size_t>(order[static_cast<size_t>(step * b + i)])];
    users[i] = r.user;
    items[i] = r.item;
    ratings[i] = r.rating;
    for (int64_t j = 0; j < k; ++j) {
      users[b + i * k + j] = r.user;
      items[b + i * k + j] = any_item(rng);
    }
  }
  StepBatch batch;
  batch.users = Int64s(users);
  batch.items = Int64s(items);
  batch.ratings = torch::tensor(ratings, torch::kFloat32);
  batch.labels = torch::cat({torch::ones({b}), torch::zeros({b * k})});
  batch.count = b;
  return batch;
}

// Counts benchmark steps; returns true when the timed window is over (result printed).
bool RecsysTraining::BenchStep() {
  if (o_.timed_iters <= 0) return false;
  ++bench_steps_;
  if (bench_steps_ == o_.warmup_iters) {
    AllReduceSum({0});
    bench_start_ = Clock::now();
  }
  if (bench_steps_ < o_.warmup_iters + o_.timed_iters) return false;
  AllReduceSum({0});
  const double secs = Seconds(bench_start_, Clock::now());
  const double per_s = static_cast<double>(o_.timed_iters) * o_.batch_size * env_.world_size / secs;
  log_.Print(
      "=> benchmark: %d timed steps, %.0f ratings/s (global), %.2f ms/step, embedding gradients %s, %s, %lld "
      "floats sent per step",
      o_.timed_iters, per_s, 1000 * secs / o_.timed_iters, EmbeddingSyncName(o_.embedding_sync), OptimizerName(),
      static_cast<long long>(table_sync_ ? table_sync_->last_floats_sent() : 0));
  if (env_.rank == 0 && !o_.bench_json.empty()) {
    std::ofstream(o_.bench_json) << nlohmann::json{{"ratings_per_s", per_s},
                                                   {"world_size", env_.world_size},
                                                   {"ms_per_step", 1000 * secs / o_.timed_iters},
                                                   {"embedding_sync", EmbeddingSyncName(o_.embedding_sync)},
                                                   {"optimizer", OptimizerName()},
                                                   {"floats_sent_per_step",
                                                    table_sync_ ? table_sync_->last_floats_sent() : 0}}
                                        .dump()
                                 << "\n";
  }
  stop_ = true;
  return true;
}

void RecsysTraining::TrainEpoch(int64_t epoch, int64_t first_step) {
  model_->train();
  const std::vector<int64_t> order = EpochOrder(epoch);
  double loss_sum = 0, sq_err = 0, data_s = 0, compute_s = 0;
  int64_t seen = 0;
  auto window = Clock::now();
  for (int64_t step = first_step; step < steps_per_epoch_;) {
    progress::ScopedSection step_section(reports_, "step");
    auto data_start = Clock::now();
    StepBatch b = MakeBatch(order, epoch, step);
    auto compute_start = Clock::now();
    data_s += Seconds(data_start, compute_start);
    NcfOutput out = model_->forward(b.users, b.items);
    torch::Tensor predicted = out.rating.narrow(0, 0, b.count);
    torch::Tensor rating_loss = torch::mse_loss(predicted, b.ratings);
    torch::Tensor loss = rating_loss + o_.interaction_weight *
                                           torch::binary_cross_entropy_with_logits(out.interaction, b.labels);
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad() = torch::Tensor();
    worker::FaultsBeforeBackward(faults_, progress_.global_step + 1, env_.rank);  // test-only
    loss.backward();
    if (ddp_) ddp_->FinishGradientSync();
    if (table_sync_) table_sync_->Synchronize();
    agreement_->FinishSnapshot();  // before the parameters change
    optimizer_->step();
    ++progress_.global_step;
    worker::FlipIfPlanned(faults_, *model_, progress_.global_step, env_.rank);  // test-only
    worker::KillIfPlanned(faults_, progress_.global_step, env_.rank);           // test-only
    ++step;
    agreement_->Arm(State(), epoch, step);  // kept if this process fails before the next step
    reports_.Beat(progress_.global_step, progress_.global_step * o_.batch_size);
    if (ddp_ && ddp_->last_sync()) {
      const worker::SyncStopwatch::Lap& lap = *ddp_->last_sync();
      reports_.Sync(progress_.global_step - lap.steps_ago, lap.wait_s, lap.step_s);
    }
    const double loss_value = loss.item<double>();
    loss_sum += loss_value * static_cast<double>(b.count);
    sq_err += rating_loss.item<double>() * static_cast<double>(b.count);
    seen += b.count;
    compute_s += Seconds(compute_start, Clock::now());
    if (BenchStep()) return;
    if (o_.timed_iters > 0) continue;
    // A stop request (SIGTERM), the save timer and the snapshot cadence: every rank must agree,
    // so they are all-reduced together, with the replica check of the state kept last.
    worker::StepWishes wishes;
    wishes.stop = worker::StopRequested();
    wishes.save = Seconds(last_save_, Clock::now()) > o_.save_every_minutes * 60;
    wishes.snapshot = snapshots_ && snapshots_->Due(Seconds(compute_start, Clock::now()));
    // A loss that is not finite on some ranks only marks them (worker/replica_check.h).
    wishes.loss_finite = std::isfinite(loss_value);
    const worker::StepVerdict next = agreement_->Decide(wishes, progress_.global_step);
    if (next.stop || next.save) {
      Save(epoch, step);
    } else if (next.snapshot) {
      agreement_->Snapshot(State(), epoch, step);  // compared in the next step's all-reduce
    }
    if (next.stop) {
      log_.Print("stop requested (%s): checkpoint written at epoch %lld step %lld", strsignal(worker::StopSignal()),
                 static_cast<long long>(epoch), static_cast<long long>(step));
      stop_ = true;
      return;
    }
    if (step % o_.print_freq == 0 || step == steps_per_epoch_) {
      const double secs = Seconds(window, Clock::now());
      const double per_s = static_cast<double>(seen) * env_.world_size / std::max(secs, 1e-9);
      const double train_rmse = std::sqrt(sq_err / static_cast<double>(std::max<int64_t>(seen, 1)));
      log_.Print("Epoch: [%lld][%lld/%lld] loss %.4f rmse %.4f ratings/s %.0f data %.3fs compute %.3fs",
                 static_cast<long long>(epoch), static_cast<long long>(step), static_cast<long long>(steps_per_epoch_),
                 loss_sum / static_cast<double>(std::max<int64_t>(seen, 1)), train_rmse, per_s, data_s, compute_s);
      metrics_.Write({{"kind", "train"}, {"epoch", epoch}, {"step", step}, {"steps_per_epoch", steps_per_epoch_},
                      {"global_step", progress_.global_step}, {"loss", loss_sum / static_cast<double>(std::max<int64_t>(seen, 1))},
                      {"rmse", train_rmse}, {"lr", o_.lr}, {"samples_per_s", per_s}, {"data_s", data_s},
                      {"compute_s", compute_s}});
      if (tb_) {
        tb_->AddScalar("train/loss", static_cast<float>(loss_sum / static_cast<double>(std::max<int64_t>(seen, 1))),
                       progress_.global_step);
        tb_->AddScalar("train/rmse", static_cast<float>(train_rmse), progress_.global_step);
        tb_->AddScalar("train/ratings_per_s", static_cast<float>(per_s), progress_.global_step);
        tb_->Flush();
      }
      loss_sum = sq_err = data_s = compute_s = 0;
      seen = 0;
      window = Clock::now();
    }
  }
}

double RecsysTraining::Evaluate(int64_t epoch) {
  progress::ScopedSection eval_section(reports_, "eval");
  model_->eval();
  torch::NoGradGuard no_grad;
  double sq_err = 0, sq_err_constant = 0, hits = 0, ndcg = 0;
  const int64_t n_test = eval_.test_users.size(0);
  for (int64_t start = 0; start < n_test; start += 8192) {
    const int64_t len = std::min<int64_t>(8192, n_test - start);
    torch::Tensor truth = eval_.test_ratings.narrow(0, start, len);
    torch::Tensor predicted =
        model_->forward(eval_.test_users.narrow(0, start, len), eval_.test_items.narrow(0, start, len)).rating;
    sq_err += (predicted.clamp(data::kMinRating, data::kMaxRating) - truth).square().sum().item<double>();
    sq_err_constant += (truth - train_mean_).square().sum().item<double>();
  }
  // Rank each user's held-out item among its sampled unrated items by the interaction logit, in
  // chunks (memory stays bounded for large catalogues).
  const int64_t candidates = eval_.rank_users.size(0);
  torch::Tensor scores = torch::empty({candidates});
  for (int64_t start = 0; start < candidates; start += 65536) {
    const int64_t len = std::min<int64_t>(65536, candidates - start);
    scores.narrow(0, start, len)
        .copy_(model_->forward(eval_.rank_users.narrow(0, start, len), eval_.rank_items.narrow(0, start, len)).interaction);
  }
  const float* s = scores.data_ptr<float>();
  int64_t offset = 0;
  for (int64_t size : eval_.group_sizes) {
    int64_t above = 0;
    for (int64_t j = 1; j < size; ++j) above += s[offset + j] > s[offset] ? 1 : 0;
    if (above < 10) {
      hits += 1;
      ndcg += 1.0 / std::log2(static_cast<double>(above) + 2.0);
    }
    offset += size;
  }
  std::vector<double> sums = AllReduceSum({sq_err, sq_err_constant, static_cast<double>(n_test), hits, ndcg,
                                           static_cast<double>(eval_.group_sizes.size())});
  const double rmse = std::sqrt(sums[0] / std::max(1.0, sums[2]));
  const double constant_rmse = std::sqrt(sums[1] / std::max(1.0, sums[2]));
  const double hr = 100 * sums[3] / std::max(1.0, sums[5]), nd = 100 * sums[4] / std::max(1.0, sums[5]);
  const double random_hr = 100.0 * std::min(10, o_.eval_negatives + 1) / (o_.eval_negatives + 1);
  log_.Print(
      " * Epoch %lld test: rmse %.4f (constant predictor %.4f) HR@10 %.2f%% (random %.1f%%) NDCG@10 %.2f%% "
      "(%d ratings, %d users)",
      static_cast<long long>(epoch), rmse, constant_rmse, hr, random_hr, nd, static_cast<int>(sums[2]),
      static_cast<int>(sums[5]));
  metrics_.Write({{"kind", "val"}, {"epoch", epoch}, {"global_step", progress_.global_step}, {"rmse", rmse},
                  {"constant_rmse", constant_rmse}, {"hr10", hr}, {"ndcg10", nd}, {"random_hr10", random_hr}});
  if (tb_) {
    tb_->AddScalar("test/rmse", static_cast<float>(rmse), progress_.global_step);
    tb_->AddScalar("test/hr10", static_cast<float>(hr), progress_.global_step);
    tb_->AddScalar("test/ndcg10", static_cast<float>(nd), progress_.global_step);
    tb_->Flush();
  }
  return hr;
}

void RecsysTraining::Save(int64_t epoch, int64_t next_step) {
  last_save_ = Clock::now();
  // Every disk checkpoint is also a snapshot (the newest snapshot is never older than it). Either
  // way the replicas are compared before anything is written (worker/step_agreement.h).
  agreement_->SnapshotAndCompare(State(), epoch, next_step);
  if (env_.rank != 0) return;
  progress_.epoch = epoch;
  progress_.next_batch = next_step;
  progress::ScopedSection checkpoint_section(reports_, "checkpoint");
  absl::Status st = worker::SaveCheckpoint(o_.output_dir + "/checkpoints", o_.keep_checkpoints, State());
  if (!st.ok())
    log_.Print("warning: %s; training goes on, the last good checkpoint is kept", std::string(st.message()).c_str());
}

int RecsysTraining::Run() {
  if (!Setup()) return 2;
  worker::InstallStopSignalHandlers();
  reports_.Hello("cpp", worker::ParksBeforeRounds());
  reports_.TotalSteps(o_.epochs * steps_per_epoch_);
  for (int64_t epoch = progress_.epoch; epoch < o_.epochs && !stop_; ++epoch) {
    TrainEpoch(epoch, epoch == progress_.epoch ? progress_.next_batch : 0);
    if (stop_) return o_.timed_iters > 0 ? 0 : 128 + worker::StopSignal();
    progress_.best_acc1 = std::max(progress_.best_acc1, Evaluate(epoch));
    Save(epoch + 1, 0);
  }
  if (snapshots_) log_.Print("=> %s", snapshots_->Summary().c_str());
  if (std::string checks = agreement_->Summary(); !checks.empty()) log_.Print("=> %s", checks.c_str());
  // The digest lets two runs be compared bit for bit (one that went back against one that did not).
  log_.Print("=> done: best HR@10 %.2f%%, %lld optimizer steps, parameter digest %016llx", progress_.best_acc1,
             static_cast<long long>(progress_.global_step),
             static_cast<unsigned long long>(worker::ParameterDigest(*model_)));
  return 0;
}

}  // namespace

int RunRecsysTraining(const RecsysOptions& options) {
  worker::InstallCrashReport();  // a fatal signal names where it hit (faulthandler's job for Python)
  // What needs no rank comes first, so that a warm start has it done before it parks: reading
  // and parsing the ratings was a quarter of a second of a restart with eight workers on two cores.
  absl::StatusOr<data::RatingsTable> table = data::ReadRatingsCsv(options.ratings);
  if (!table.ok()) {
    worker::ReportFatalError(kProgram, table.status().message());
    return 2;
  }
  // A warm start parks here, before anything reads the round's environment (worker/warm_start.h).
  if (absl::Status st = worker::AwaitRound(); !st.ok()) {
    worker::ReportFatalError(kProgram, st.message());
    return 1;
  }
  absl::StatusOr<worker::DistEnv> env = worker::ReadDistEnv();
  if (!env.ok()) {
    worker::ReportFatalError(kProgram, env.status().message());
    return 2;
  }
  try {
    return RecsysTraining(options, *std::move(env), std::move(*table)).Run();
  } catch (const worker::ReplicasDiverged&) {
    return worker::kReplicasDivergedExitCode;  // said on stderr by the check
  } catch (const std::exception& e) {
    worker::ReportException(kProgram, e);
    return 1;
  }
}

}  // namespace dtrun::recsys

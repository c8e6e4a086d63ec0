// train_recsys: a recommendation model (neural collaborative filtering) trained with DDP on a
// MovieLens-style ratings.csv, one process or many (under dtrun or torchrun):
//   dtdata make-ratings ratings.csv
//   dtrun --standalone --nproc-per-node 2 train_recsys ratings.csv --epochs 10
#include <cstdio>
#include <filesystem>
#include <optional>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/build_info.h"
#include "examples/cli_checks.h"
#include "examples/train_recsys/recsys_trainer.h"
#include "worker/error_record.h"

namespace {
constexpr char kProgram[] = "train_recsys";
}  // namespace

int main(int argc, char** argv) {
  using dtrun::examples::Ints;
  using dtrun::examples::Reals;
  dtrun::recsys::RecsysOptions o;
  CLI::App app("train_recsys: neural collaborative filtering with DDP on MovieLens-style ratings", "train_recsys");
  app.set_version_flag("--version", dtrun::VersionText("train_recsys"));
  app.add_option("ratings", o.ratings, "ratings.csv: userId,movieId,rating,timestamp (MovieLens layout)")->required();
  app.add_option("--epochs", o.epochs)->capture_default_str()->check(Ints(1));
  app.add_option("-b,--batch-size", o.batch_size, "Ratings per process and step")->capture_default_str()->check(Ints(1, 1 << 20));
  app.add_option("--lr", o.lr, "Adam's learning rate")->capture_default_str()->check(Reals(0, 10, /*open_low=*/true));
  app.add_option("--wd,--weight-decay", o.weight_decay)->capture_default_str()->check(Reals(0, 1));
  app.add_option("--dim", o.dim, "Embedding size")->capture_default_str()->check(Ints(1, 4096));
  app.add_option("--hidden", o.hidden, "MLP widths, comma-separated")
      ->delimiter(',')
      ->check(Ints(1, 65536))
      ->capture_default_str();
  app.add_option("--negatives", o.negatives, "Sampled unrated items per rating (interaction loss)")
      ->capture_default_str()->check(Ints(0, 1000));
  app.add_option("--interaction-weight", o.interaction_weight, "Weight of the interaction loss")
      ->capture_default_str()->check(Reals(0, 1000));
  app.add_option("--test-fraction", o.test_fraction, "Each user's latest ratings held out for testing")
      ->capture_default_str()->check(Reals(0, 1, false, /*open_high=*/true));
  app.add_option("--eval-negatives", o.eval_negatives, "HR@10/NDCG@10: held-out item among this many unrated ones")
      ->capture_default_str()->check(Ints(1, 100000));
  dtrun::examples::OneOf<dtrun::recsys::EmbeddingSync>(
      app.add_option("--embedding-sync", o.embedding_sync, "Embedding gradients across ranks: sparse (touched rows) or dense"),
      {{"sparse", dtrun::recsys::EmbeddingSync::kSparse}, {"dense", dtrun::recsys::EmbeddingSync::kDense}})
      ->default_str("sparse");
  app.add_flag("--lazy-adam", o.lazy_adam,
               "Adam updates only the embedding rows a step used, as PyTorch's SparseAdam (a step's cost follows "
               "the batch, not the tables)");
  app.add_option("--seed", o.seed)->capture_default_str();
  app.add_option("--threads", o.threads, "Compute threads (default: OMP_NUM_THREADS)")->check(Ints(1, 4096));
  app.add_option("-p,--print-freq", o.print_freq)->capture_default_str()->check(Ints(1));
  app.add_option("--output-dir,--state-dir", o.output_dir, "Checkpoints, metrics.jsonl, tb/")->capture_default_str();
  app.add_option("--save-every-minutes", o.save_every_minutes)->capture_default_str()->check(Reals(0, 1e6));
  app.add_option("--resume", o.resume, "Checkpoint to start from (default: newest in --output-dir)");
  app.add_option("--collective-timeout", o.collective_timeout_s, "Seconds before a hung collective ends the worker (exit 75)")
      ->capture_default_str()->check(Reals(0, 1e7, true));
  app.add_flag("!--no-tensorboard", o.tensorboard, "Do not write TensorBoard event files");
  dtrun::examples::AddBenchmarkFlags(app, {&o.warmup_iters, &o.timed_iters, &o.bench_json}, "ratings", 1);
  if (std::optional<int> exit_code = dtrun::examples::ParseCommandLine(app, argc, argv, kProgram)) return *exit_code;
  if (o.lazy_adam && o.embedding_sync == dtrun::recsys::EmbeddingSync::kDense) {
    dtrun::worker::ReportFatalError(kProgram,
                                    "--lazy-adam needs the sparse embedding sync (the dense all-reduce hands "
                                    "Adam whole tables): leave --embedding-sync dense out");
    return 2;
  }
  if (!o.resume.empty() && !std::filesystem::is_regular_file(o.resume)) {
    dtrun::worker::ReportFatalError(kProgram,
                                    absl::StrCat("--resume ", o.resume,
                                                 ": no such checkpoint file; give a checkpoint-*.pt path, or leave "
                                                 "--resume out to continue from the newest in --output-dir"));
    return 2;
  }
  return dtrun::recsys::RunRecsysTraining(o);
}

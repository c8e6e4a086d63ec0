// train_recsys under dtrun: 2 DDP processes learn on generated MovieLens-style ratings (test RMSE
// well below the constant predictor's, HR@10 well above random); a killed worker resumes with
// exactly the planned steps; bad CSV lines are named and skipped; dtplot draws the run, and the
// numbers behind its pictures are the run's metrics.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "base/process_table.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/metrics_schema.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

bool Built() { return std::filesystem::exists(BinDir() + "/train_recsys"); }

std::string Ratings() {
  static const std::string path = [] {
    std::string p = MakeTempDir() + "/ratings.csv";
    auto [rc, out] = RunToEnd({BinDir() + "/dtdata", "make-ratings", p, "--users", "300", "--items", "800"});
    EXPECT_EQ(rc, 0) << out;
    return p;
  }();
  return path;
}

std::vector<std::string> RecsysUnderDtrun(const std::string& ratings, const std::string& out,
                                          std::vector<std::string> extra, std::vector<std::string> launch = {}) {
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
  argv.insert(argv.end(), launch.begin(), launch.end());
  for (const std::string& a : std::vector<std::string>{BinDir() + "/train_recsys", ratings, "--output-dir", out}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Width and height from a PNG's IHDR chunk.
std::pair<uint32_t, uint32_t> PngSize(const std::string& path) {
  std::string bytes = ReadText(path);
  if (bytes.size() < 24 || bytes.compare(1, 3, "PNG") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  return {be32(16), be32(20)};
}

std::vector<nlohmann::json> ValRecords(const std::string& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "val") out.push_back(j);
  }
  return out;
}

TEST(RecsysTest, TwoProcessesLearnAndDtplotDrawsTheRunFromItsMetrics) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string out = MakeTempDir() + "/run";
  auto [rc, log] = RunToEnd(RecsysUnderDtrun(Ratings(), out, {"--epochs", "3", "-b", "128", "-p", "20"}));
  ASSERT_EQ(rc, 0) << log;
  ExpectMetricsFollowSchema(out + "/metrics.jsonl");
  std::vector<nlohmann::json> val = ValRecords(out + "/metrics.jsonl");
  ASSERT_EQ(val.size(), 3u) << log;
  const nlohmann::json& last = val.back();
  EXPECT_LT(last["rmse"].get<double>(), 0.9 * last["constant_rmse"].get<double>()) << log;
  EXPECT_GT(last["hr10"].get<double>(), 2.5 * last["random_hr10"].get<double>()) << log;
  EXPECT_NE(log.find("HR@10"), std::string::npos);

  const std::string data = out + "/plot-data.json";
  auto [prc, plot_out] = RunToEnd({BinDir() + "/dtplot", out, "--data-json", data});
  ASSERT_EQ(prc, 0) << plot_out;
  for (const char* png : {"learning_curves.png", "throughput.png", "io.png"}) {
    EXPECT_NE(plot_out.find(out + "/" + png), std::string::npos) << plot_out;
    auto [w, h] = PngSize(out + "/" + png);
    EXPECT_GE(w, 600u) << png;
    EXPECT_GE(h, 300u) << png;
    EXPECT_GT(std::filesystem::file_size(out + "/" + png), 10000u) << png;
  }
  // The picture's test-RMSE line is the run's three evaluations, at the end of epochs 1, 2, 3.
  nlohmann::json plotted = nlohmann::json::parse(ReadText(data));
  const nlohmann::json& rmse = plotted["learning_curves"]["Test RMSE"]["test"];
  ASSERT_EQ(rmse.size(), 3u) << plotted.dump();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(rmse[i][0].get<double>(), static_cast<double>(i + 1));
    EXPECT_DOUBLE_EQ(rmse[i][1].get<double>(), val[i]["rmse"].get<double>());
  }
  EXPECT_EQ(plotted["learning_curves"]["Ranking: held-out item among sampled ones"]["HR@10"].size(), 3u);
  EXPECT_FALSE(plotted["io"]["run"]["data_ms"].empty());
  EXPECT_FALSE(plotted["throughput"]["run"].empty());
}

TEST(RecsysTest, KilledWorkerResumesFromTheCheckpointWithExactlyThePlannedSteps) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string out = MakeTempDir() + "/run";
  Harness job(RecsysUnderDtrun(Ratings(), out, {"--epochs", "2", "-b", "512", "-p", "1", "--save-every-minutes", "0"},
                               {"--max-restarts", "1"}));
  ASSERT_TRUE(job.WaitForOutput("Epoch: [1][3/", std::chrono::seconds(120))) << job.all();
  std::smatch m;
  const std::string before = job.all();
  ASSERT_TRUE(std::regex_search(before, m, std::regex(R"((\d+) steps per epoch)"))) << before;
  const int per_epoch = std::stoi(m[1]);
  const pid_t victim = WorkerOf(job.pid(), 1);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(job.Wait(std::chrono::seconds(180)), 0) << job.all();
  EXPECT_NE(job.all().find("resuming from"), std::string::npos) << job.all();
  EXPECT_NE(job.all().find(std::to_string(2 * per_epoch) + " optimizer steps"), std::string::npos) << job.all();
}

// --lazy-adam (worker/lazy_adam.h, the averaged gradients left sparse by the all-gather): the
// model learns to the same bars as with Adam, and a worker killed mid-run resumes with its moments
// and exactly the planned steps.
TEST(RecsysTest, WithLazyAdamTwoProcessesLearnAndAKilledWorkerResumes) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string out = MakeTempDir() + "/run";
  Harness job(RecsysUnderDtrun(Ratings(), out, {"--lazy-adam", "--epochs", "3", "-b", "128", "-p", "1"},
                               {"--max-restarts", "1"}));
  ASSERT_TRUE(job.WaitForOutput("Epoch: [1][3/", std::chrono::seconds(120))) << job.all();
  const pid_t victim = WorkerOf(job.pid(), 1);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  ASSERT_EQ(job.Wait(std::chrono::seconds(180)), 0) << job.all();
  const std::string log = job.all();
  EXPECT_NE(log.find("sparse embedding gradients, lazy Adam"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"((\d+) steps per epoch)"))) << log;
  EXPECT_NE(log.find(std::to_string(3 * std::stoi(m[1])) + " optimizer steps"), std::string::npos) << log;
  std::vector<nlohmann::json> val = ValRecords(out + "/metrics.jsonl");
  ASSERT_FALSE(val.empty()) << log;
  const nlohmann::json& last = val.back();
  EXPECT_EQ(last["epoch"].get<int64_t>(), 2) << log;
  EXPECT_LT(last["rmse"].get<double>(), 0.9 * last["constant_rmse"].get<double>()) << log;
  EXPECT_GT(last["hr10"].get<double>(), 2.5 * last["random_hr10"].get<double>()) << log;
}

// Lazy Adam needs row-sparse gradients, which the dense all-reduce does not give: refused before
// anything is written, in one line that says what to change.
TEST(RecsysTest, LazyAdamWithTheDenseSyncIsRefusedWithTheFix) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string out = MakeTempDir() + "/run";
  auto [rc, text] = RunToEnd(
      {BinDir() + "/train_recsys", Ratings(), "--output-dir", out, "--lazy-adam", "--embedding-sync", "dense"});
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("--lazy-adam needs the sparse embedding sync"), std::string::npos) << text;
  EXPECT_NE(text.find("leave --embedding-sync dense out"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Tables of 100,000 rows and more, where Adam's dense update starts to dominate the step: the log
// says once what --lazy-adam would change; with --lazy-adam, or on small tables, it says nothing.
TEST(RecsysTest, AdamOnLargeTablesSuggestsLazyAdamInOneLine) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  // 60,000 users rating 2 of a million items each (by genre, in about a second): > 100,000 rows.
  auto [made, made_text] = RunToEnd({BinDir() + "/dtdata", "make-ratings", dir + "/large.csv", "--users", "60000",
                                     "--items", "1000000", "--min-per-user", "2", "--max-per-user", "2"});
  ASSERT_EQ(made, 0) << made_text;
  const auto run = [&](const std::string& ratings, std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinDir() + "/train_recsys", ratings, "--output-dir",  dir + "/run",
                                     "--warmup-iters",           "1",     "--timed-iters", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunToEnd(argv);
  };
  auto [rc, text] = run(dir + "/large.csv", {});
  ASSERT_EQ(rc, 0) << text;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(text, m, std::regex(R"(hint: Adam updates all (\d+) table rows every step; --lazy-adam)")))
      << text;
  EXPECT_GE(std::stoll(m[1]), 100'000) << text;
  EXPECT_EQ(text.find("hint:", text.find("hint:") + 1), std::string::npos) << text;
  auto [lazy_rc, lazy_text] = run(dir + "/large.csv", {"--lazy-adam"});
  ASSERT_EQ(lazy_rc, 0) << lazy_text;
  EXPECT_EQ(lazy_text.find("hint:"), std::string::npos) << lazy_text;
  auto [small_rc, small_text] = run(Ratings(), {});
  ASSERT_EQ(small_rc, 0) << small_text;
  EXPECT_EQ(small_text.find("hint:"), std::string::npos) << small_text;
}

// Debian's libtorch installed without its recommends runs on netlib's reference BLAS, ~3x slower
// for this model: the run names the library and the fix in one line. With an optimised BLAS (the
// one scripts/install-deps.sh installs) it says nothing.
TEST(RecsysTest, TheReferenceBlasIsNamedWithTheFixAndAnOptimisedOneIsNot) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas";
  if (!std::filesystem::exists(reference + "/libblas.so.3")) {
    GTEST_SKIP() << "netlib's libblas3 is not installed (scripts/install-deps.sh installs it)";
  }
  const std::string out = MakeTempDir() + "/run";
  const std::vector<std::string> argv = {BinDir() + "/train_recsys", Ratings(), "--output-dir",  out,
                                         "--warmup-iters",           "1",       "--timed-iters", "1"};
  auto [rc, text] = RunToEnd(argv, {{"LD_LIBRARY_PATH", reference}});
  ASSERT_EQ(rc, 0) << text;
  const size_t at = text.find("warning: matrix products run on the reference BLAS (" + reference);
  EXPECT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.find("apt install libopenblas0-openmp", at), std::string::npos) << text;
  EXPECT_EQ(text.find("reference BLAS", text.find('\n', at)), std::string::npos) << text;  // once
  auto [default_rc, default_text] = RunToEnd(argv);
  ASSERT_EQ(default_rc, 0) << default_text;
  EXPECT_EQ(default_text.find("reference BLAS"), std::string::npos)
      << "scripts/install-deps.sh installs OpenBLAS, which this run should have used:\n"
      << default_text;
}

// A run stopped mid-epoch by 2 workers and resumed by 1: the single worker's epoch is twice as
// long, and it goes on at twice the batch, so the job trains every rating of the epoch once.
TEST(RecsysTest, ARunResumedWithFewerWorkersGoesOnAtTheSameSamplesOfItsEpoch) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string out = MakeTempDir() + "/run";
  auto run = [&](int workers) {
    return std::vector<std::string>{DtrunBinary(), "--standalone", "--nproc-per-node", std::to_string(workers),
                                    BinDir() + "/train_recsys", Ratings(), "--output-dir", out, "--epochs", "2", "-b",
                                    "128", "-p", "1", "--no-tensorboard"};
  };
  auto steps_per_epoch = [](const std::string& log) {
    std::smatch m;
    return std::regex_search(log, m, std::regex(R"((\d+) steps per epoch)")) ? std::stoi(m[1]) : -1;
  };
  Harness two(run(2));
  ASSERT_TRUE(two.WaitForOutput("Epoch: [1][2/", std::chrono::seconds(120))) << two.all();
  ::kill(two.pid(), SIGTERM);
  EXPECT_NE(two.Wait(std::chrono::seconds(120)), 0) << two.all();
  std::smatch stop;
  const std::string stopped = two.all();
  ASSERT_TRUE(std::regex_search(stopped, stop, std::regex(R"(checkpoint written at epoch 1 step (\d+))"))) << stopped;
  const int at = std::stoi(stop[1]), per_epoch_of_two = steps_per_epoch(stopped);
  ASSERT_GT(per_epoch_of_two, at) << stopped;

  auto [rc, log] = RunToEnd(run(1));
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("epoch 1 was saved at batch " + std::to_string(at) + " of 256 samples a step; at this run's "
                     "128 samples a step it goes on at batch " + std::to_string(2 * at)),
            std::string::npos)
      << log;
  // Epoch 0 by two workers, `at` of their steps in epoch 1, the rest of it by one.
  const int per_epoch_of_one = steps_per_epoch(log);
  ASSERT_GT(per_epoch_of_one, 2 * at) << log;
  EXPECT_NE(log.find(std::to_string(per_epoch_of_two + at + per_epoch_of_one - 2 * at) + " optimizer steps"),
            std::string::npos)
      << log;
}

TEST(RecsysTest, BadLinesAreNamedAndSkippedAndAnEmptyFileIsRefusedWithTheFix) {
  if (!Built()) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  {
    std::ifstream in(Ratings());
    std::ofstream bad(dir + "/bad.csv");
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      bad << line << "\n";
      if (n == 5) bad << "7,not-a-movie,4.0,100\n";   // line 6
      if (n == 9) bad << "7,12,4.0\n";                // line 11
    }
  }
  auto [rc, log] = RunToEnd(RecsysUnderDtrun(dir + "/bad.csv", dir + "/run", {"--epochs", "1", "-b", "256"}));
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("2 malformed lines skipped (line 6: userId and movieId must be whole numbers; line 11: 3 fields"),
            std::string::npos) << log;
  std::ofstream(dir + "/empty.csv").flush();
  auto [erc, elog] = RunToEnd({BinDir() + "/train_recsys", dir + "/empty.csv", "--output-dir", dir + "/run2"});
  EXPECT_EQ(erc, 2) << elog;
  EXPECT_NE(elog.find("empty.csv: it holds no ratings"), std::string::npos) << elog;
}

}  // namespace
}  // namespace dtrun::testing

#include "worker/checkpoint.h"

#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::worker {
namespace {

TEST(CheckpointTest, TruncatedNewestFallsBackToThePreviousOne) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Progress p1{1, 0, 10, 12.5};
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, opt, p1).ok());
  torch::Tensor saved = model->weight.detach().clone();
  {
    torch::NoGradGuard g;
    model->weight.add_(1);
  }
  Progress p2{1, 7, 17, 12.5};
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, opt, p2).ok());
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 2u);
  std::filesystem::resize_file(files.back(), std::filesystem::file_size(files.back()) / 2);  // torn write
  std::optional<LoadedCheckpoint> loaded = LoadCheckpoint(dir, "", *model, opt);
  std::optional<Progress> got;
  if (loaded) got = loaded->progress;
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->global_step, 10);
  EXPECT_EQ(got->next_batch, 0);
  EXPECT_TRUE(torch::equal(model->weight, saved));
}

TEST(CheckpointTest, KeepsOnlyTheNewestK) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(2, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(SaveCheckpoint(dir, 2, *model, opt, Progress{i, 0, i, 0}).ok());
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) n += e.path().extension() == ".pt";
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(LoadCheckpoint(dir, "", *model, opt)->progress.epoch, 4);
  EXPECT_FALSE(LoadCheckpoint(dtrun::testing::MakeTempDir(), "", *model, opt).has_value());
}

TEST(CheckpointTest, BestAccuracyRoundTripsExactly) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, opt, Progress{2, 5, 77, 20.625}).ok());
  std::optional<LoadedCheckpoint> loaded = LoadCheckpoint(dir, "", *model, opt);
  std::optional<Progress> got;
  if (loaded) got = loaded->progress;
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->best_acc1, 20.625);  // was the bits of 20.625 read as an int64
  EXPECT_EQ(got->global_step, 77);
}

// The global batch the position was saved at comes back; a checkpoint written before it was
// recorded loads with 0 (not recorded: its position is kept as it is).
TEST(CheckpointTest, TheGlobalBatchRoundTripsAndAnOlderFileWithoutItLoadsAsNotRecorded) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  Progress p{2, 5, 77, 20.625};
  p.global_batch = 768;
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, opt, p).ok());
  std::optional<LoadedCheckpoint> loaded = LoadCheckpoint(dir, "", *model, opt);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->progress.global_batch, 768);

  const std::string older_dir = dtrun::testing::MakeTempDir() + "/older";
  std::filesystem::create_directories(older_dir);
  torch::serialize::OutputArchive archive, model_archive, optim_archive;
  model->save(model_archive);
  opt.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("epoch", torch::tensor(int64_t{2}));
  archive.write("next_batch", torch::tensor(int64_t{5}));
  archive.write("global_step", torch::tensor(int64_t{77}));
  archive.write("best_acc1", torch::tensor(20.625, torch::kFloat64));
  archive.save_to(older_dir + "/checkpoint-000002-000000005.pt");
  loaded = LoadCheckpoint(older_dir, "", *model, opt);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->progress.global_batch, 0);
  EXPECT_EQ(loaded->progress.next_batch, 5);
}

TEST(CheckpointTest, ACheckpointThatFailsHalfWayLeavesTheModelAsItWas) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, sgd, Progress{1, 0, 1, 0}).ok());
  {
    torch::NoGradGuard g;
    model->weight.add_(1);  // now differs from the checkpoint
  }
  const torch::Tensor before = model->weight.detach().clone();
  // The model part loads, the optimizer part cannot (another optimizer's state).
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.1));
  EXPECT_FALSE(LoadCheckpoint(dir, "", *model, adam).has_value());
  EXPECT_TRUE(torch::equal(model->weight, before));
}

// A full disk (the temp file is a link to /dev/full, which fails every write with ENOSPC): one
// line with the reason, no temp file left, the older checkpoint untouched.
TEST(CheckpointTest, AFullDiskIsNamedAndLeavesNoTempFileBehind) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  ASSERT_TRUE(SaveCheckpoint(dir, 3, *model, opt, Progress{1, 0, 1, 0}).ok());
  const std::string tmp = dir + "/checkpoint-000002-000000000.pt.tmp";
  ASSERT_EQ(::symlink("/dev/full", tmp.c_str()), 0);
  absl::Status st = SaveCheckpoint(dir, 3, *model, opt, Progress{2, 0, 2, 0});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("No space left on device"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("choose another --output-dir"), absl::string_view::npos) << st;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tmp)));
  std::optional<LoadedCheckpoint> loaded = LoadCheckpoint(dir, "", *model, opt);
  std::optional<Progress> got;
  if (loaded) got = loaded->progress;
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->epoch, 1);
}

TEST(CheckpointTest, OnlyRealFilesTakeARetentionSlot) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  std::filesystem::create_directories(dir + "/checkpoint-999999-000000000.pt");  // a directory
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SaveCheckpoint(dir, 2, *model, opt, Progress{i, 0, i, 0}).ok());
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
  EXPECT_EQ(LoadCheckpoint(dir, "", *model, opt)->progress.epoch, 2);
}

TEST(CheckpointTest, PreparingTheDirRemovesStaleTempsAndRefusesAnUnusablePath) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  std::filesystem::create_directories(dir);
  const std::string stale = dir + "/checkpoint-000001-000000000.pt.tmp";
  std::FILE* f = std::fopen(stale.c_str(), "w");
  std::fputs("half a checkpoint", f);
  std::fclose(f);
  EXPECT_TRUE(PrepareCheckpointDir(dir).ok());
  EXPECT_FALSE(std::filesystem::exists(stale));
  const std::string file = dtrun::testing::MakeTempDir() + "/a-file";
  std::fclose(std::fopen(file.c_str(), "w"));
  absl::Status st = PrepareCheckpointDir(file + "/checkpoints");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--output-dir"), absl::string_view::npos) << st;
}

// A read-only disk (a tmpfs mounted read-only in a mount namespace of this test process): at
// start and at a save, one line with the reason.
TEST(CheckpointTest, AReadOnlyDiskIsNamedAtStartAndAtASave) {
  if (::geteuid() != 0 || ::unshare(CLONE_NEWNS) != 0) GTEST_SKIP() << "needs root (a private mount namespace)";
  // Nothing leaks out. In a chroot (trixie-chroot's LibTorch 2.6 build) "/" is no mount point.
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    GTEST_SKIP() << "cannot make / private in this mount namespace (" << std::strerror(errno) << "): a chroot?";
  }
  const std::string disk = dtrun::testing::MakeTempDir();
  ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=4m"), 0);
  std::filesystem::create_directories(disk + "/ckpt");
  ASSERT_EQ(::mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=4m"), 0);
  absl::Status start = PrepareCheckpointDir(disk + "/ckpt");
  EXPECT_NE(start.message().find("Read-only file system"), absl::string_view::npos) << start;
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  absl::Status save = SaveCheckpoint(disk + "/ckpt", 3, *model, opt, Progress{1, 0, 1, 0});
  EXPECT_NE(save.message().find("Read-only file system"), absl::string_view::npos) << save;
  EXPECT_NE(save.message().find("--output-dir"), absl::string_view::npos) << save;
  ::umount2(disk.c_str(), MNT_DETACH);
}

// Checkpoint files are untrusted input too (a disk error, a file from elsewhere). A seeded
// randomized test, since the fuzz build has no LibTorch: corruptions of real checkpoints —
// flipped bytes, truncations, overwritten runs — each either loads or is DataLoss with the model
// unchanged; nothing crashes or throws. (Without worker/zip_check.h, LibTorch's reader crashed in
// TorchScript's parser on some of them.)
TEST(CheckpointTest, RandomlyCorruptedCheckpointsNeverCrashOrHalfLoad) {
  int rejected = 0;
  for (uint64_t seed : {1, 2, 3}) {  // three models, 300 corruptions each
    torch::manual_seed(seed);
    std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
    torch::nn::Linear model(8, 4);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    ASSERT_TRUE(SaveCheckpoint(dir, 1, *model, opt, Progress{3, 1, 7, 1.5}).ok());
    std::optional<LoadedCheckpoint> good = LoadCheckpoint(dir, "", *model, opt);
    ASSERT_TRUE(good.has_value());
    std::mt19937_64 rng(20261122 + seed);
    for (int i = 0; i < 300; ++i) {
      std::string bytes = good->bytes;
      switch (i % 3) {
        case 0:
          for (int k = 0; k < 8; ++k) bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 1:
          bytes.resize(rng() % bytes.size());
          break;
        case 2: {
          size_t at = rng() % bytes.size();
          for (size_t k = at; k < std::min(bytes.size(), at + 64); ++k) bytes[k] = static_cast<char>(rng());
          break;
        }
      }
      {
        torch::NoGradGuard g;
        model->weight.fill_(0.25);
      }
      absl::StatusOr<Progress> p = LoadCheckpointBytes(bytes, *model, opt);
      if (!p.ok()) {
        ++rejected;
        EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
        EXPECT_TRUE(torch::all(model->weight == 0.25).item<bool>()) << seed << "/" << i;  // nothing half-loaded
      }
    }
  }
  EXPECT_GT(rejected, 800);  // the zip's checksums catch nearly every corruption before LibTorch
}

}  // namespace
}  // namespace dtrun::worker

#include "worker/checkpoint.h"

#include <filesystem>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::worker {
namespace {

TEST(CheckpointTest, TruncatedNewestFallsBackToThePreviousOne) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Progress p1{1, 0, 10, 12.5};
  SaveCheckpoint(dir, 3, *model, opt, p1);
  torch::Tensor saved = model->weight.detach().clone();
  {
    torch::NoGradGuard g;
    model->weight.add_(1);
  }
  Progress p2{1, 7, 17, 12.5};
  SaveCheckpoint(dir, 3, *model, opt, p2);
  std::vector<std::filesystem::path> files;
  for (auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 2u);
  std::filesystem::resize_file(files.back(), std::filesystem::file_size(files.back()) / 2);  // torn write
  std::optional<Progress> got = LoadCheckpoint(dir, "", *model, opt);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->global_step, 10);
  EXPECT_EQ(got->next_batch, 0);
  EXPECT_TRUE(torch::equal(model->weight, saved));
}

TEST(CheckpointTest, KeepsOnlyTheNewestK) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(2, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int i = 0; i < 5; ++i) SaveCheckpoint(dir, 2, *model, opt, Progress{i, 0, i, 0});
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) n += e.path().extension() == ".pt";
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(LoadCheckpoint(dir, "", *model, opt)->epoch, 4);
  EXPECT_FALSE(LoadCheckpoint(dtrun::testing::MakeTempDir(), "", *model, opt).has_value());
}

TEST(CheckpointTest, BestAccuracyRoundTripsExactly) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  SaveCheckpoint(dir, 3, *model, opt, Progress{2, 5, 77, 20.625});
  std::optional<Progress> got = LoadCheckpoint(dir, "", *model, opt);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->best_acc1, 20.625);  // was the bits of 20.625 read as an int64
  EXPECT_EQ(got->global_step, 77);
}

TEST(CheckpointTest, ACheckpointThatFailsHalfWayLeavesTheModelAsItWas) {
  std::string dir = dtrun::testing::MakeTempDir() + "/ckpt";
  torch::nn::Linear model(4, 2);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  SaveCheckpoint(dir, 3, *model, sgd, Progress{1, 0, 1, 0});
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

}  // namespace
}  // namespace dtrun::worker

#include "worker/train_state.h"

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

// A model with a buffer, trained by Adam (per-parameter step counts: values re-read in place).
struct AdamJob {
  torch::nn::Sequential model{torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2)};
  torch::optim::Adam optimizer{model->parameters(), torch::optim::AdamOptions(1e-2)};
  GradScaler scaler;
  Progress progress;

  AdamJob() { torch::manual_seed(3); }
  TrainState State() { return TrainState{model.ptr().get(), &optimizer, &scaler, &progress}; }
  void Step() {
    optimizer.zero_grad();
    model->forward(torch::randn({16, 4})).sum().backward();
    optimizer.step();
    ++progress.global_step;
    progress.next_batch += 3;
    progress.best_acc1 += 0.5;
    torch::rand({5});  // draws from the CPU generator, as a data augmentation would
    scaler.SetState(scaler.scale() / 2, progress.global_step % 7);
  }
};

void ExpectSameListing(const std::vector<StateTensor>& read, const std::vector<StateTensor>& fresh) {
  ASSERT_EQ(read.size(), fresh.size());
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].name, fresh[i].name);
    EXPECT_TRUE(torch::equal(read[i].tensor, fresh[i].tensor)) << read[i].name;
    EXPECT_EQ(read[i].changes_only_in_optimizer_step, fresh[i].changes_only_in_optimizer_step) << read[i].name;
  }
}

// Read again in place, the listing holds what listing anew would: the progress, the scaler, the
// CPU generator, Adam's step counts and the buffers as they are now.
TEST(StateListingTest, ReadAgainItHoldsWhatAFreshListingHolds) {
  AdamJob job;
  job.Step();
  StateListing listing;
  for (int i = 0; i < 5; ++i) {
    const std::vector<StateTensor>& read = listing.Read(job.State());
    ExpectSameListing(read, StateTensors(job.State()));
    job.Step();
  }
  EXPECT_EQ(listing.listed(), 1) << "the same model and optimizer: listed once";
}

// What changes the set of tensors lists anew: the optimizer's state appearing at the first step,
// a parameter registered, the optimizer's state replaced (a checkpoint loaded).
TEST(StateListingTest, ListsAnewWhenTheTensorsAreOthers) {
  AdamJob job;
  StateListing listing;
  const size_t before_first_step = listing.Read(job.State()).size();
  job.Step();
  ExpectSameListing(listing.Read(job.State()), StateTensors(job.State()));
  EXPECT_EQ(listing.listed(), 2);
  EXPECT_GT(listing.Read(job.State()).size(), before_first_step) << "Adam's state is listed";
  EXPECT_EQ(listing.listed(), 2);

  job.model->register_parameter("extra", torch::ones({3}));
  ExpectSameListing(listing.Read(job.State()), StateTensors(job.State()));
  EXPECT_EQ(listing.listed(), 3);

  torch::optim::Adam other(job.model->parameters(), torch::optim::AdamOptions(1e-2));
  other.zero_grad();
  job.model->forward(torch::randn({16, 4})).sum().backward();
  other.step();
  for (auto& [key, state] : other.state()) job.optimizer.state()[key] = state->clone();
  ExpectSameListing(listing.Read(job.State()), StateTensors(job.State()));
  EXPECT_EQ(listing.listed(), 4);
}

// LibTorch 1.x keys an optimizer's state by the parameter's TensorImpl address as an ostream
// prints it; the key written out by hand must be that string, or a parameter's state is not found.
TEST(OptimizerStateKeyTest, IsTheAddressAsLibTorchPrintsIt) {
  AdamJob job;
  job.Step();
  for (const torch::Tensor& p : job.model->parameters()) {
    const auto key = OptimizerStateKey(job.optimizer.state(), p);
    if constexpr (std::is_same_v<std::decay_t<decltype(key)>, std::string>) {
      std::ostringstream printed;
      printed << p.unsafeGetTensorImpl();
      EXPECT_EQ(key, printed.str());
    }
    EXPECT_EQ(job.optimizer.state().count(key), 1u);
  }
}

}  // namespace
}  // namespace dtrun::worker

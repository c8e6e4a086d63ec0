// A small job's state and the agent-held snapshot region a worker of it would get, for tests of
// the in-memory snapshots (worker/memory_snapshot.h) and the job-wide resume (worker/job_resume.h).
// Snapshots sets and unsets environment variables: make them on the test's main thread.
#pragma once

#include <stdlib.h>
#include <torch/torch.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "base/env_names.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "snapshot/snapshot_region.h"
#include "worker/memory_snapshot.h"
#include "worker/train_state.h"

namespace dtrun::worker::testing {

// A model with a buffer that a forward pass changes (batch norm's running mean) and parameters
// that only the optimizer changes, trained one step so that SGD has momentum buffers.
struct Job {
  torch::nn::Sequential model{torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8), torch::nn::Linear(8, 2)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  Progress progress;

  Job() {
    torch::manual_seed(7);
    for (auto& p : model->parameters()) {
      torch::NoGradGuard no_grad;
      p.normal_();
    }
    Step();
  }
  TrainState State() { return TrainState{model.ptr().get(), &optimizer, nullptr, &progress}; }
  void Forward() { model->forward(torch::randn({16, 4})).sum().backward(); }
  void Step() {
    optimizer.zero_grad();
    Forward();
    optimizer.step();
    ++progress.global_step;
  }
  std::vector<torch::Tensor> Values() {
    std::vector<torch::Tensor> out;
    for (const StateTensor& t : StateTensors(State())) out.push_back(t.tensor.detach().clone());
    return out;
  }
};

// A region held the way the agent holds it, handed over through the environment, to a worker of
// `env`; with `region_of`, that worker's region (the agent keeps a local rank's region across
// rounds, whatever rank and world size the next round gives it).
class Snapshots {
 public:
  explicit Snapshots(const char* copy_mode, DistEnv env = {}, const Snapshots* region_of = nullptr) {
    if (region_of != nullptr) {
      fd_ = UniqueFd(::dup(region_of->fd_.get()));
    } else {
      absl::StatusOr<UniqueFd> fd = snapshot::CreateRegion(64 << 20, "memory-snapshot-test");
      EXPECT_TRUE(fd.ok()) << fd.status();
      fd_ = std::move(*fd);
    }
    setenv(env::kSnapshotFd, std::to_string(fd_.get()).c_str(), 1);
    setenv(env::kRunId, "memory-snapshot-test", 1);
    if (copy_mode) {
      setenv(env::kSnapshotCopy, copy_mode, 1);
    } else {
      unsetenv(env::kSnapshotCopy);
    }
    snapshots_ = MemorySnapshots::FromEnvironment(env);
    unsetenv(env::kSnapshotFd);
    unsetenv(env::kSnapshotCopy);
  }
  MemorySnapshots& operator*() { return *snapshots_; }
  MemorySnapshots* operator->() { return snapshots_.get(); }
  uint64_t HashOfStep(int64_t step) const {
    for (const absl::StatusOr<snapshot::SlotHeader>& h : snapshot::ReadHeaders(fd_.get())) {
      if (h.ok() && h->step == step) return h->payload_hash;
    }
    return 0;
  }

 private:
  UniqueFd fd_;
  std::unique_ptr<MemorySnapshots> snapshots_;
};

inline DistEnv RankOf(int rank, int world_size) {
  DistEnv env;
  env.rank = rank;
  env.world_size = world_size;
  return env;
}

inline void ExpectEqualValues(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
}

}  // namespace dtrun::worker::testing

#include "worker/lazy_adam.h"

#include "gtest/gtest.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

constexpr int64_t kRows = 6, kDim = 3;

torch::optim::AdamOptions Options() { return torch::optim::AdamOptions(0.05).weight_decay(1e-2); }

torch::Tensor Table() {
  torch::manual_seed(0);
  return torch::randn({kRows, kDim}, torch::requires_grad());
}

// A row-sparse gradient: `values` for `rows` (rows may repeat; they add up).
torch::Tensor SparseGrad(const std::vector<int64_t>& rows, const torch::Tensor& values) {
  return torch::sparse_coo_tensor(torch::tensor(rows, torch::kInt64).unsqueeze(0), values, {kRows, kDim});
}

torch::Tensor Values(int64_t n, int step) {
  return torch::arange(n * kDim, torch::kFloat32).view({n, kDim}).sin().mul(step + 1);
}

torch::optim::AdamParamState& StateOf(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  return static_cast<torch::optim::AdamParamState&>(*opt.state().at(OptimizerStateKey(opt.state(), p)));
}

std::vector<int64_t> AllRows() {
  std::vector<int64_t> rows(kRows);
  for (int64_t i = 0; i < kRows; ++i) rows[static_cast<size_t>(i)] = i;
  return rows;
}

// A gradient that holds every row every step: dense Adam's update, its moments and step count.
TEST(LazyAdamTest, EveryRowTouchedIsAdamsUpdate) {
  torch::Tensor lazy_table = Table(), dense_table = Table();
  LazyAdam lazy({lazy_table}, Options());
  torch::optim::Adam dense({dense_table}, Options());
  for (int step = 0; step < 5; ++step) {
    lazy_table.mutable_grad() = SparseGrad(AllRows(), Values(kRows, step));
    dense_table.mutable_grad() = Values(kRows, step);
    lazy.step();
    dense.step();
  }
  EXPECT_TRUE(torch::allclose(lazy_table, dense_table, 1e-6, 1e-7)) << lazy_table - dense_table;
  const auto& l = StateOf(lazy, lazy_table);
  const auto& d = StateOf(dense, dense_table);
  EXPECT_EQ(l.step(), d.step());
  EXPECT_TRUE(torch::allclose(l.exp_avg(), d.exp_avg(), 1e-6, 1e-7));
  EXPECT_TRUE(torch::allclose(l.exp_avg_sq(), d.exp_avg_sq(), 1e-6, 1e-7));
}

// Rows a step's gradient does not hold keep their values and their moments, bit for bit; the
// rows it holds move. Dense Adam would move every row by its momentum.
TEST(LazyAdamTest, RowsNotInTheGradientStayAsTheyAre) {
  torch::Tensor table = Table();
  LazyAdam opt({table}, Options());
  table.mutable_grad() = SparseGrad({0, 2}, Values(2, 0));
  opt.step();
  const torch::Tensor after_first = table.detach().clone();
  const torch::Tensor avg_after_first = StateOf(opt, table).exp_avg().clone();
  table.mutable_grad() = SparseGrad({2, 3}, Values(2, 1));
  opt.step();

  for (int64_t row : {0, 1, 4, 5}) {
    EXPECT_TRUE(torch::equal(table[row], after_first[row])) << "row " << row;
    EXPECT_TRUE(torch::equal(StateOf(opt, table).exp_avg()[row], avg_after_first[row])) << "row " << row;
  }
  for (int64_t row : {2, 3}) EXPECT_FALSE(torch::equal(table[row], after_first[row])) << "row " << row;
  EXPECT_FALSE(torch::equal(after_first[0], Table()[0])) << "row 0 moved in the first step";
  EXPECT_EQ(StateOf(opt, table).step(), 2);
}

// A row that appears twice in a gradient (two samples of a batch) is updated once, with the sum.
TEST(LazyAdamTest, RepeatedRowsAddUp) {
  torch::Tensor repeated = Table(), summed = Table();
  LazyAdam a({repeated}, Options()), b({summed}, Options());
  const torch::Tensor v = Values(2, 0);
  repeated.mutable_grad() = SparseGrad({4, 4}, v);
  summed.mutable_grad() = SparseGrad({4}, (v[0] + v[1]).unsqueeze(0));
  a.step();
  b.step();
  EXPECT_TRUE(torch::allclose(repeated, summed, 1e-6, 1e-7));
}

// Dense gradients in the same optimizer (a model's other layers) get Adam's own update, and every
// gradient is still there after the step.
TEST(LazyAdamTest, DenseParametersBesideGetAdamsUpdate) {
  torch::Tensor table = Table();
  torch::manual_seed(1);
  torch::Tensor weight = torch::randn({4, 2}, torch::requires_grad());
  torch::Tensor reference = weight.detach().clone().requires_grad_(true);
  LazyAdam lazy({table, weight}, Options());
  torch::optim::Adam dense({reference}, Options());
  for (int step = 0; step < 3; ++step) {
    table.mutable_grad() = SparseGrad({1}, Values(1, step));
    weight.mutable_grad() = torch::full({4, 2}, 0.3 * (step + 1));
    reference.mutable_grad() = weight.grad().clone();
    lazy.step();
    dense.step();
  }
  EXPECT_TRUE(torch::equal(weight, reference));
  EXPECT_TRUE(table.grad().defined() && table.grad().is_sparse());
  EXPECT_TRUE(weight.grad().defined());
}

// An empty sparse gradient (a table the batch did not use) changes nothing, not even the count.
TEST(LazyAdamTest, AnEmptyGradientChangesNothing) {
  torch::Tensor table = Table();
  const torch::Tensor before = table.detach().clone();
  LazyAdam opt({table}, Options());
  table.mutable_grad() = SparseGrad({}, torch::empty({0, kDim}));
  opt.step();
  EXPECT_TRUE(torch::equal(table, before));
  EXPECT_EQ(StateOf(opt, table).step(), 0);
}

TEST(LazyAdamTest, AmsgradWithASparseGradientIsRefused) {
  torch::Tensor table = Table();
  LazyAdam opt({table}, Options().amsgrad(true));
  table.mutable_grad() = SparseGrad({0}, Values(1, 0));
  try {
    opt.step();
    FAIL() << "amsgrad was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("amsgrad"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrun::worker

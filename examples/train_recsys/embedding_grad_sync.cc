#include "examples/train_recsys/embedding_grad_sync.h"

#include "worker/ddp.h"

namespace dtrun::recsys {

EmbeddingGradSync::EmbeddingGradSync(std::vector<torch::Tensor> tables, worker::ProcessGroupHandle pg, int world_size,
                                     EmbeddingSync mode, worker::CollectiveWatchdog* watchdog, bool sparse_result)
    : tables_(std::move(tables)),
      pg_(std::move(pg)),
      world_size_(world_size),
      mode_(mode),
      watchdog_(watchdog),
      sparse_result_(sparse_result && mode == EmbeddingSync::kSparse) {
  worker::CollectiveWatchdog::Scope guard(watchdog_, "the embedding tables' broadcast");
  worker::BroadcastFromRankZero(pg_, tables_);
}

void EmbeddingGradSync::Synchronize() {
  last_floats_sent_ = 0;
  if (mode_ == EmbeddingSync::kDense) {
    SynchronizeDense();
  } else {
    SynchronizeSparse();
  }
}

void EmbeddingGradSync::SynchronizeDense() {
  std::vector<torch::Tensor> flat_parts;
  for (torch::Tensor& t : tables_) {
    torch::Tensor g = t.grad();
    flat_parts.push_back(g.defined() ? g.reshape(-1) : torch::zeros({t.numel()}));
  }
  std::vector<torch::Tensor> flat{torch::cat(flat_parts)};
  last_floats_sent_ = flat[0].numel();
  {
    worker::CollectiveWatchdog::Scope guard(watchdog_, "the embedding gradients' all-reduce");
    pg_.backend->allreduce(flat)->wait();
  }
  flat[0].div_(world_size_);
  int64_t offset = 0;
  for (torch::Tensor& t : tables_) {
    t.mutable_grad() = flat[0].narrow(0, offset, t.numel()).view(t.sizes());
    offset += t.numel();
  }
}

// Two collectives for all tables together: the touched-row counts, then the rows. Each table's
// rows travel as a block [index, values...] padded to the largest count any rank has for that
// table (Gloo's all-gather takes equal sizes); the receiving ranks read each rank's own count of
// rows and skip its padding.
void EmbeddingGradSync::SynchronizeSparse() {
  const size_t n = tables_.size();
  std::vector<torch::Tensor> indices(n), values(n);
  std::vector<int64_t> my_counts(n);
  for (size_t t = 0; t < n; ++t) {
    torch::Tensor g = tables_[t].grad();
    if (g.defined()) {
      g = g.coalesce();
      indices[t] = g.indices().reshape(-1);
      values[t] = g.values();
    } else {
      indices[t] = torch::empty({0}, torch::kInt64);
      values[t] = torch::empty({0, tables_[t].size(1)});
    }
    my_counts[t] = indices[t].size(0);
  }
  worker::CollectiveWatchdog::Scope guard(watchdog_, "the embedding gradients' all-gather");
  std::vector<torch::Tensor> counts_in{torch::tensor(my_counts, torch::kInt64)};
  std::vector<std::vector<torch::Tensor>> counts_out(1);
  for (int r = 0; r < world_size_; ++r) counts_out[0].push_back(torch::empty({static_cast<int64_t>(n)}, torch::kInt64));
  pg_.backend->allgather(counts_out, counts_in)->wait();
  std::vector<int64_t> most(n, 0);
  for (const torch::Tensor& c : counts_out[0]) {
    for (size_t t = 0; t < n; ++t) most[t] = std::max(most[t], c[static_cast<int64_t>(t)].item<int64_t>());
  }
  // Row indices ride as floats beside the values: exact in float32 below 2^24 rows, else float64.
  int64_t rows_max = 0, total = 0;
  for (size_t t = 0; t < n; ++t) {
    rows_max = std::max(rows_max, tables_[t].size(0));
    total += most[t] * (tables_[t].size(1) + 1);
  }
  const auto dtype = rows_max < (int64_t{1} << 24) ? torch::kFloat32 : torch::kFloat64;
  torch::Tensor packed = torch::zeros({total}, dtype);
  int64_t offset = 0;
  for (size_t t = 0; t < n; ++t) {
    const int64_t width = tables_[t].size(1) + 1;
    torch::Tensor block = packed.narrow(0, offset, most[t] * width).view({most[t], width});
    block.narrow(0, 0, my_counts[t]).select(1, 0).copy_(indices[t]);
    block.narrow(0, 0, my_counts[t]).narrow(1, 1, width - 1).copy_(values[t]);
    offset += most[t] * width;
  }
  std::vector<torch::Tensor> mine{packed};
  std::vector<std::vector<torch::Tensor>> all(1);
  for (int r = 0; r < world_size_; ++r) all[0].push_back(torch::empty_like(packed));
  if (total > 0) pg_.backend->allgather(all, mine)->wait();
  last_floats_sent_ = total;
  for (size_t t = 0; t < n; ++t) tables_[t].mutable_grad() = GatheredGradient(t, all[0], counts_out[0], most);
}

torch::Tensor EmbeddingGradSync::GatheredGradient(size_t t, const std::vector<torch::Tensor>& all,
                                                  const std::vector<torch::Tensor>& counts,
                                                  const std::vector<int64_t>& most) const {
  const torch::Tensor& table = tables_[t];
  const int64_t width = table.size(1) + 1;
  int64_t offset = 0;  // of table t's block in every rank's packed tensor
  for (size_t u = 0; u < t; ++u) offset += most[u] * (tables_[u].size(1) + 1);
  std::vector<torch::Tensor> rows, values;
  for (size_t r = 0; r < all.size(); ++r) {
    const int64_t count = counts[r][static_cast<int64_t>(t)].item<int64_t>();  // <= most[t]: the block holds it
    if (count == 0) continue;
    const torch::Tensor block = all[r].narrow(0, offset, count * width).view({count, width});
    rows.push_back(block.select(1, 0).to(torch::kInt64));
    values.push_back(block.narrow(1, 1, width - 1).to(table.dtype()));
  }
  if (sparse_result_) {
    const torch::Tensor index = rows.empty() ? torch::empty({0}, torch::kInt64) : torch::cat(rows);
    const torch::Tensor value = values.empty() ? torch::empty({0, width - 1}, table.dtype()) : torch::cat(values);
    return torch::sparse_coo_tensor(index.unsqueeze(0), value.div_(world_size_), table.sizes()).coalesce();
  }
  torch::Tensor grad = torch::zeros_like(table);
  for (size_t i = 0; i < rows.size(); ++i) grad.index_add_(0, rows[i], values[i]);
  return grad.div_(world_size_);
}

}  // namespace dtrun::recsys

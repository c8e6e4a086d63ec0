// How the embedding tables' gradients cross ranks (embedding_grad_sync.h): the rows each rank
// touched (kSparse) or whole tables (kDense).
#pragma once

namespace dtrun::recsys {

enum class EmbeddingSync { kDense, kSparse };

inline const char* EmbeddingSyncName(EmbeddingSync sync) { return sync == EmbeddingSync::kSparse ? "sparse" : "dense"; }

}  // namespace dtrun::recsys

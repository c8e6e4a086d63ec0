// The payload of a snapshot slot: a table of contents naming each tensor (dtype, element size,
// sizes, strides, where its bytes are), then the tensors' bytes, each 64-byte aligned. The table
// is decoded with every offset and size checked against the payload actually there, so a payload
// whose checksum matched but whose writer lied cannot make a reader index out of bounds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun::snapshot {

inline constexpr size_t kMaxTensors = 1 << 20;
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr int kMaxDims = 16;

struct TensorRecord {
  std::string name;
  int32_t dtype = 0;      // c10::ScalarType, as the writer's LibTorch numbers it
  int32_t item_bytes = 0;
  std::vector<int64_t> sizes, strides;  // strides in elements
  uint64_t offset = 0;    // from the payload's start
  uint64_t nbytes = 0;    // the bytes the strided tensor spans
};

// The bytes a tensor of these sizes and strides spans (0 for an empty one); nullopt on overflow
// or a negative entry.
std::optional<uint64_t> SpanBytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                  int32_t item_bytes);

// Lays the records out: sets each offset (after the table, 64-byte aligned) and returns the
// payload's total size. Records must have name, dtype, item size, sizes, strides and nbytes.
uint64_t LayOut(std::vector<TensorRecord>& records);
// The table's bytes for laid-out records (written at the payload's start).
std::string EncodeToc(const std::vector<TensorRecord>& records);
// Decodes and checks the table of a payload of payload.size() bytes. DataLoss names the problem.
absl::StatusOr<std::vector<TensorRecord>> DecodeToc(absl::string_view payload);

// XXH3-64 over a payload written in pieces, equal to PayloadHash over the whole.
class PayloadHasher {
 public:
  PayloadHasher();
  ~PayloadHasher();
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dtrun::snapshot

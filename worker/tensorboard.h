// TensorBoard event files (no LibTorch, no protobuf): scalars written as TFRecord-framed `Event`
// protos (length, masked CRC32C of the length, data, masked CRC32C of the data), readable by
// TensorBoard. Rank 0 writes one file per run. Not thread-safe.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace dtrun::worker {

// CRC-32C (Castagnoli). Bookworm has no crc32c library package and Abseil 20220623 has no
// absl/crc, so this is the one hand-written checksum in the project (tested against RFC 3720).
uint32_t Crc32c(std::string_view data);
// TFRecord's mask: rotate right 15 bits, add 0xa282ead8.
uint32_t MaskedCrc32c(std::string_view data);

class EventWriter {
 public:
  // Creates DIR/events.out.tfevents.<seconds>.<host> and writes the file-version record.
  explicit EventWriter(const std::string& dir);
  bool ok() const { return static_cast<bool>(out_); }
  const std::string& path() const { return path_; }
  void AddScalar(const std::string& tag, float value, int64_t step, double wall_time = 0);
  void Flush() { out_.flush(); }

 private:
  void WriteRecord(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace dtrun::worker

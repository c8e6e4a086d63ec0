#include "worker/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

namespace dtrun::worker {
namespace {

std::array<uint32_t, 256> Table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protobuf wire format, just what Event/Summary need.
void Varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void Key(std::string& out, int field, int wire_type) { Varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
template <typename T>
void Fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void Bytes(std::string& out, int field, std::string_view v) {
  Key(out, field, 2);
  Varint(out, v.size());
  out.append(v);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = Table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(std::string_view data) {
  uint32_t c = Crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[128] = {};
  ::gethostname(host, sizeof(host) - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(Now())) + "." + host;
  out_.open(path_, std::ios::binary | std::ios::app);
  std::string event;
  Key(event, 1, 1);
  Fixed(event, Now());
  Bytes(event, 3, "brain.Event:2");  // file_version
  WriteRecord(event);
}

void EventWriter::AddScalar(const std::string& tag, float value, int64_t step, double wall_time) {
  std::string v;  // Summary.Value
  Bytes(v, 1, tag);
  Key(v, 2, 5);
  Fixed(v, value);  // simple_value
  std::string summary;
  Bytes(summary, 1, v);
  std::string event;
  Key(event, 1, 1);
  Fixed(event, wall_time > 0 ? wall_time : Now());
  Key(event, 2, 0);
  Varint(event, static_cast<uint64_t>(step));
  Bytes(event, 5, summary);
  WriteRecord(event);
}

void EventWriter::WriteRecord(const std::string& event) {
  std::string len;
  Fixed(len, static_cast<uint64_t>(event.size()));
  std::string rec = len;
  Fixed(rec, MaskedCrc32c(len));
  rec += event;
  Fixed(rec, MaskedCrc32c(event));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
}

}  // namespace dtrun::worker

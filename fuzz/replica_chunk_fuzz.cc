// A buddy's chunk as any peer may send it, cut into gRPC slices anywhere. IncomingChunk may take
// only what protobuf's own parser takes, and must read it as protobuf does (the same auth, header
// and data, its pieces adding up to the data). It may refuse more (a group, an over-long tag),
// but never what protobuf writes: for every message protobuf took, protobuf's own serialisation
// of it must be taken and read alike, and SerializeChunk must write those very bytes.
#include <cstdint>
#include <string>
#include <vector>

#include "replica/chunk_wire.h"

namespace {

using Chunk = dtrun::rdzv::v1::ReplicaChunk;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) __builtin_trap();
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Parses `bytes` in slices of `piece` bytes.
bool ParseSliced(const std::string& bytes, size_t piece, dtrun::replica::IncomingChunk* chunk) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) slices.emplace_back(bytes.substr(at, piece));
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  return chunk->Parse(&buffer).ok();
}

// `chunk` holds what `expected` holds (unknown fields aside).
void ExpectSame(const dtrun::replica::IncomingChunk& chunk, const Chunk& expected) {
  Chunk head = chunk.head();
  head.DiscardUnknownFields();
  if (head.has_auth() != expected.has_auth() || head.has_header() != expected.has_header() ||
      head.auth().SerializeAsString() != expected.auth().SerializeAsString() ||
      head.header().SerializeAsString() != expected.header().SerializeAsString()) {
    __builtin_trap();
  }
  std::string got;
  const absl::Status walked = chunk.ForEachDataPiece([&](absl::string_view p) {
    got.append(p.data(), p.size());
    return absl::OkStatus();
  });
  if (!walked.ok() || got != expected.data() || chunk.data_size() != got.size()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] % 16 + 1;  // the slices gRPC hands over
  const std::string bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  Chunk expected;
  const bool protobufs = expected.ParseFromString(bytes);
  expected.DiscardUnknownFields();

  // Whatever it takes, protobuf takes, and reads the same.
  dtrun::replica::IncomingChunk chunk;
  if (ParseSliced(bytes, piece, &chunk)) {
    if (!protobufs) __builtin_trap();
    ExpectSame(chunk, expected);
  }
  if (!protobufs) return 0;

  // What protobuf writes for that message, it takes; and it writes the same bytes.
  const std::string canonical = expected.SerializeAsString();
  dtrun::replica::IncomingChunk again;
  if (!ParseSliced(canonical, piece, &again)) __builtin_trap();
  ExpectSame(again, expected);
  Chunk head = expected;
  head.clear_data();
  auto owner = std::make_shared<const std::string>(expected.data());
  if (Flatten(dtrun::replica::SerializeChunk({&head, *owner, owner})) != canonical) __builtin_trap();
  return 0;
}

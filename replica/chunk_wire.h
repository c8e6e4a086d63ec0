// ReplicaChunk messages (proto/rendezvous.proto) written and read without passing their data
// through a protobuf `bytes` field. Through the generated code a 90 MB copy was copied twice more
// on each side: into the message's string and from it into gRPC's buffers (sending), out of gRPC's
// buffers into the string and on into the copy (receiving); memcpy was the largest item of the
// bench's profile (bench/replica_push_bench). Here the sender's data goes to gRPC as a slice of its
// own memory, and the receiver's stays in gRPC's slices until CopyAssembler takes it. The bytes on
// the wire are those protobuf writes and reads: either end may be an older dtrun.
#pragma once

#include <grpcpp/impl/serialization_traits.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/rendezvous.pb.h"

namespace dtrun::replica {

// A chunk to send: `head` (its auth and header; its data field is not read) and `data`, which gRPC
// sends from where it lies. `owner` keeps those bytes there until gRPC lets go of them, which may
// be after the call has ended (a cancelled stream's last frames).
struct OutgoingChunk {
  const rdzv::v1::ReplicaChunk* head = nullptr;
  absl::string_view data;
  std::shared_ptr<const void> owner;
};

// A chunk received: its auth and header parsed, its data left in gRPC's slices.
class IncomingChunk {
 public:
  const rdzv::v1::ReplicaChunk& head() const { return head_; }
  size_t data_size() const { return data_size_; }
  // Calls `take` with the data's bytes in order, in one or more pieces (none when empty); stops at
  // the first error it returns.
  absl::Status ForEachDataPiece(const std::function<absl::Status(absl::string_view)>& take) const;

  // Takes `received` (gRPC's message) and parses it as protobuf would: fields in any order, a
  // repeated data field's last value wins, unknown fields (or known ones of another wire type) are
  // skipped. InvalidArgument for whatever protobuf would refuse, and for a few things it would
  // take that no protobuf serialiser writes: a group, a tag or length of more than 5 bytes.
  absl::Status Parse(grpc::ByteBuffer* received);

 private:
  grpc::ByteBuffer buffer_;
  std::vector<grpc::Slice> slices_;
  rdzv::v1::ReplicaChunk head_;  // data field empty
  size_t data_offset_ = 0;
  size_t data_size_ = 0;
};

// `chunk` as gRPC's message: the head serialised by protobuf, the data field's tag and length,
// then the data as a slice of the sender's memory.
grpc::ByteBuffer SerializeChunk(const OutgoingChunk& chunk);

}  // namespace dtrun::replica

// gRPC's streams take any type with these (grpcpp/impl/serialization_traits.h).
namespace grpc {

template <>
class SerializationTraits<dtrun::replica::OutgoingChunk, void> {
 public:
  static Status Serialize(const dtrun::replica::OutgoingChunk& chunk, ByteBuffer* buffer, bool* own_buffer) {
    *buffer = dtrun::replica::SerializeChunk(chunk);
    *own_buffer = true;
    return Status::OK;
  }
};

template <>
class SerializationTraits<dtrun::replica::IncomingChunk, void> {
 public:
  static Status Deserialize(ByteBuffer* buffer, dtrun::replica::IncomingChunk* chunk) {
    const absl::Status st = chunk->Parse(buffer);
    if (st.ok()) return Status::OK;
    return Status(StatusCode::INTERNAL, std::string(st.message()));
  }
};

}  // namespace grpc

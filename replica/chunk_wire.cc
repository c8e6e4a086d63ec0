#include "replica/chunk_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrun::replica {
namespace {

using google::protobuf::internal::WireFormatLite;
using Chunk = rdzv::v1::ReplicaChunk;

absl::Status NotAChunk(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("a buddy copy's chunk is not a ReplicaChunk message (", what, "); the copy is dropped"));
}

// A message field: its size is computed first (WriteMessage writes the size cached by it).
void WriteField(int number, const google::protobuf::MessageLite& message,
                google::protobuf::io::CodedOutputStream* out) {
  message.ByteSizeLong();
  WireFormatLite::WriteMessage(number, message, out);
}

// protobuf's parser takes tags and lengths of at most 5 bytes; CodedInputStream, which reads
// them here, takes up to 10 (the fuzzer found a 9-byte tag taken). Longer ones are refused.
constexpr int kMaxVarint32Bytes = 5;

bool ReadLength(google::protobuf::io::CodedInputStream* in, int* length) {
  const int before = in->CurrentPosition();
  return in->ReadVarintSizeAsInt(length) && in->CurrentPosition() - before <= kMaxVarint32Bytes;
}

// A message field read into `message` (merged, as protobuf merges a repeated one). Its few bytes
// are copied out first: protobuf 3.21's parser, given a length past the end of a stream, takes a
// message cut short as whole (the fuzzer found it).
bool MergeField(google::protobuf::io::CodedInputStream* in, google::protobuf::MessageLite* message) {
  int length = 0;
  std::string bytes;
  return ReadLength(in, &length) && in->ReadString(&bytes, length) && message->MergeFromString(bytes);
}

// The destroy callback of a data slice: drops its share of the bytes' owner.
void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace

grpc::ByteBuffer SerializeChunk(const OutgoingChunk& chunk) {
  std::string prefix;
  {
    google::protobuf::io::StringOutputStream raw(&prefix);
    google::protobuf::io::CodedOutputStream out(&raw);
    if (chunk.head->has_auth()) WriteField(Chunk::kAuthFieldNumber, chunk.head->auth(), &out);
    if (chunk.head->has_header()) WriteField(Chunk::kHeaderFieldNumber, chunk.head->header(), &out);
    if (!chunk.data.empty()) {  // as protobuf: an empty bytes field is not written
      WireFormatLite::WriteTag(Chunk::kDataFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED, &out);
      out.WriteVarint64(chunk.data.size());
    }
  }
  std::vector<grpc::Slice> slices = {grpc::Slice(prefix)};
  if (!chunk.data.empty()) {
    // gRPC only reads the data (the slice type has no const constructor with a destroy callback).
    slices.emplace_back(const_cast<char*>(chunk.data.data()), chunk.data.size(), &ReleaseOwner,
                        new std::shared_ptr<const void>(chunk.owner));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

absl::Status IncomingChunk::Parse(grpc::ByteBuffer* received) {
  // Emptied first, so that `received` is left empty: gRPC forgets it after Deserialize without
  // destroying it (as protobuf's own Deserialize clears it), and would leak what we swapped in.
  buffer_.Clear();
  buffer_.Swap(received);
  slices_.clear();
  head_.Clear();
  data_offset_ = data_size_ = 0;
  {
    grpc::ProtoBufferReader reader(&buffer_);
    if (!reader.status().ok()) return NotAChunk("unreadable buffer");
    google::protobuf::io::CodedInputStream in(&reader);
    for (int at = 0;; at = in.CurrentPosition()) {
      const uint32_t tag = in.ReadTag();
      if (tag == 0) break;
      if (in.CurrentPosition() - at > kMaxVarint32Bytes) return NotAChunk("a tag longer than 5 bytes");
      const int field = WireFormatLite::GetTagFieldNumber(tag);
      // No serialiser writes field 0, and protobuf refuses some of its wire types.
      if (field == 0) return NotAChunk("field number 0");
      // A known field number with another wire type is an unknown field to protobuf, and skipped.
      const bool delimited = WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
      bool ok = true;
      if (delimited && field == Chunk::kAuthFieldNumber) {
        ok = MergeField(&in, head_.mutable_auth());
      } else if (delimited && field == Chunk::kHeaderFieldNumber) {
        ok = MergeField(&in, head_.mutable_header());
      } else if (delimited && field == Chunk::kDataFieldNumber) {
        int length = 0;
        ok = ReadLength(&in, &length);
        if (ok) {
          data_offset_ = static_cast<size_t>(in.CurrentPosition());
          data_size_ = static_cast<size_t>(length);
          ok = in.Skip(length);
        }
      } else if (delimited) {
        // An unknown field's length too is refused past 5 bytes: CodedInputStream's skip reads
        // up to 10 and keeps the low 32 bits (the fuzzer found 7 << 35 skipped as 0).
        int length = 0;
        ok = ReadLength(&in, &length) && in.Skip(length);
      } else if (WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_START_GROUP) {
        // Skipping one would read the tags inside it as CodedInputStream does, not as protobuf's
        // parser does. No protobuf serialiser writes a group into a proto3 message.
        return NotAChunk(absl::StrCat("field ", field, " is a group"));
      } else {
        ok = WireFormatLite::SkipField(&in, tag);
      }
      if (!ok) return NotAChunk(absl::StrCat("field ", field, " is cut short or malformed"));
    }
    if (!in.ConsumedEntireMessage()) return NotAChunk("a zero or end-group tag");
  }
  if (data_size_ > 0 && !buffer_.Dump(&slices_).ok()) return NotAChunk("unreadable buffer");
  return absl::OkStatus();
}

absl::Status IncomingChunk::ForEachDataPiece(const std::function<absl::Status(absl::string_view)>& take) const {
  size_t skip = data_offset_, left = data_size_;
  for (const grpc::Slice& slice : slices_) {
    if (left == 0) break;
    const char* bytes = reinterpret_cast<const char*>(slice.begin());
    if (skip >= slice.size()) {
      skip -= slice.size();
      continue;
    }
    const size_t n = std::min(left, slice.size() - skip);
    if (absl::Status st = take(absl::string_view(bytes + skip, n)); !st.ok()) return st;
    skip = 0;
    left -= n;
  }
  return absl::OkStatus();
}

}  // namespace dtrun::replica

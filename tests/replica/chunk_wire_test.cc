// The chunk codec against protobuf's own: what SerializeChunk writes is the bytes protobuf writes
// for the same message, and IncomingChunk reads what protobuf writes (cut into slices anywhere)
// and what another peer may send as protobuf does, and refuses what protobuf refuses, and a group.
// The data's owner is held as long as gRPC holds the data.
#include "replica/chunk_wire.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun::replica {
namespace {

using Chunk = rdzv::v1::ReplicaChunk;

Chunk FullChunk(const std::string& data) {
  Chunk c;
  c.mutable_auth()->set_run_id("job");
  c.mutable_auth()->set_token("secret");
  c.mutable_header()->set_step(12);
  c.mutable_header()->set_payload_bytes(99);
  c.set_data(data);
  return c;
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as gRPC might hand them over: in slices of `piece` bytes.
grpc::ByteBuffer InSlices(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) slices.emplace_back(bytes.substr(at, piece));
  if (slices.empty()) slices.emplace_back(std::string());
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string DataOf(const IncomingChunk& chunk) {
  std::string out;
  EXPECT_TRUE(chunk
                  .ForEachDataPiece([&](absl::string_view piece) {
                    out.append(piece.data(), piece.size());
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

// Parses `bytes` both ways and expects the same outcome and the same fields.
void ExpectReadAsProtobufReadsIt(const std::string& bytes, size_t piece) {
  Chunk expected;
  const bool protobuf_ok = expected.ParseFromString(bytes);
  IncomingChunk chunk;
  grpc::ByteBuffer buffer = InSlices(bytes, piece);
  const absl::Status st = chunk.Parse(&buffer);
  ASSERT_EQ(st.ok(), protobuf_ok) << st;
  if (!st.ok()) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("ReplicaChunk"), std::string::npos) << st;
    return;
  }
  EXPECT_EQ(chunk.head().has_auth(), expected.has_auth());
  EXPECT_EQ(chunk.head().auth().SerializeAsString(), expected.auth().SerializeAsString());
  EXPECT_EQ(chunk.head().has_header(), expected.has_header());
  EXPECT_EQ(chunk.head().header().SerializeAsString(), expected.header().SerializeAsString());
  EXPECT_EQ(chunk.data_size(), expected.data().size());
  EXPECT_EQ(DataOf(chunk), expected.data());
}

TEST(ChunkWireTest, WritesTheBytesProtobufWrites) {
  const std::string data(300, 'd');  // a length of two bytes
  for (const Chunk& c : {FullChunk(data), FullChunk(""), Chunk()}) {
    Chunk head = c;
    head.clear_data();
    auto owner = std::make_shared<std::string>(c.data());
    EXPECT_EQ(Flatten(SerializeChunk({&head, *owner, owner})), c.SerializeAsString());
  }
  Chunk only_data;
  only_data.set_data("x");
  Chunk empty_head;
  auto owner = std::make_shared<std::string>("x");
  EXPECT_EQ(Flatten(SerializeChunk({&empty_head, *owner, owner})), only_data.SerializeAsString());
}

TEST(ChunkWireTest, TheDataIsSentFromItsOwnerWhichIsHeldUntilGrpcLetsGo) {
  Chunk head;
  auto owner = std::make_shared<const std::string>(1 << 20, 'p');
  std::weak_ptr<const std::string> watch = owner;
  {
    grpc::ByteBuffer buffer = SerializeChunk({&head, *owner, owner});
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()), owner->data());  // not a copy
    owner.reset();
    EXPECT_FALSE(watch.expired());  // the buffer holds it
  }
  EXPECT_TRUE(watch.expired());
}

TEST(ChunkWireTest, ReadsWhatProtobufWritesInSlicesOfAnySize) {
  const std::string bytes = FullChunk(std::string(3000, 'q') + "end").SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}, bytes.size()}) {
    SCOPED_TRACE(piece);
    ExpectReadAsProtobufReadsIt(bytes, piece);
  }
}

TEST(ChunkWireTest, ReadsFieldsInAnyOrderRepeatedAndUnknownAsProtobufDoes) {
  const Chunk full = FullChunk("first");
  const std::string auth = full.auth().SerializeAsString(), header = full.header().SerializeAsString();
  auto field = [](int number, const std::string& value) {
    return std::string(1, static_cast<char>(number << 3 | 2)) + static_cast<char>(value.size()) + value;
  };
  // The data before the header, the data twice (the last wins), an unknown varint field and an
  // unknown delimited one, the header field number with the varint wire type (unknown to
  // protobuf), an empty chunk.
  for (const std::string& bytes :
       {field(3, "data") + field(2, header) + field(1, auth), field(3, "old") + field(3, "new"),
        std::string("\x28\x05", 2) + field(9, "skip me") + field(3, "kept"), std::string("\x10\x01", 2) + field(3, "d"),
        field(2, header) + field(2, header), std::string()}) {
    SCOPED_TRACE(bytes);
    ExpectReadAsProtobufReadsIt(bytes, 3);
  }
}

TEST(ChunkWireTest, RefusesWhatProtobufRefuses) {
  const std::string good = FullChunk("payload").SerializeAsString();
  for (const std::string& bytes : {
           good.substr(0, good.size() - 1),             // the data cut short
           std::string("\x1a\xff\xff\xff\xff\x0f", 6),  // a length past the message (and past INT_MAX)
           std::string("\x00", 1) + good,               // tag 0
           std::string("\x0c", 1),                      // an end-group tag at the top
           std::string("\x0f", 1),                      // wire type 7
           std::string("\x12\x02\x0a", 3),              // the header's own field cut short
           // The header's length past the chunk's end, its fields up to there well-formed
           // (protobuf's CodedInputStream path took it whole; found by fuzz/replica_chunk_fuzz).
           std::string("\x12\x0f\x10\x01\x08\x9a\xef\x3a\x1a\x05world", 15),
           std::string("\x0a\x03\x0a\x01\x80", 5),          // a run id that is not UTF-8
           std::string("\x98\x80\x80\x80\x80\x00\x01", 7),  // a tag of 6 bytes (fuzz/replica_chunk_fuzz)
           std::string("\x1a\x81\x80\x80\x80\x00x", 7),     // a length of 6 bytes
           std::string("\x02\x00", 2),                      // field number 0
           // An unknown field's length of 6 bytes, 7 << 35: 0 in its low 32 bits (the fuzzer).
           std::string("\x2a\x80\x80\x80\x80\x80\x07\x0d\x50\x50\x40\x50\x50\x50", 14),
       }) {
    SCOPED_TRACE(bytes);
    ExpectReadAsProtobufReadsIt(bytes, 2);
  }
}

// protobuf would skip an unknown group; skipping one here would read the tags inside it by
// CodedInputStream's rules, not protobuf's (the fuzzer found a tag of 8 bytes inside one taken).
TEST(ChunkWireTest, AGroupIsRefusedThoughNoSerialiserWritesOne) {
  const std::string bytes = std::string("\x73\x08\x01\x74", 4) + FullChunk("d").SerializeAsString();
  Chunk protobufs;
  ASSERT_TRUE(protobufs.ParseFromString(bytes));
  IncomingChunk chunk;
  grpc::ByteBuffer buffer = InSlices(bytes, 4);
  const absl::Status st = chunk.Parse(&buffer);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("field 14 is a group"), std::string::npos) << st;
}

TEST(ChunkWireTest, APieceTheReceiverRefusesEndsTheWalk) {
  const std::string bytes = FullChunk(std::string(100, 'z')).SerializeAsString();
  IncomingChunk chunk;
  grpc::ByteBuffer buffer = InSlices(bytes, 10);
  ASSERT_TRUE(chunk.Parse(&buffer).ok());
  int calls = 0;
  const absl::Status st = chunk.ForEachDataPiece([&](absl::string_view) {
    ++calls;
    return absl::OutOfRangeError("too much");
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace dtrun::replica

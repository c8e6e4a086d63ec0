// Bytes an event loop still owes a non-blocking socket or pipe.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/cord_buffer.h"
#include "absl/strings/string_view.h"

namespace dtrun {

// Sending takes bytes from the front without moving the rest (a Cord's chunks are dropped or cut,
// never copied), so a large backlog drained a little per wake costs what was sent, not what is
// held. A std::string erased from the front costs a copy of the whole backlog per write: 64 MiB of
// store replies sent to a slow reader 64 KiB at a time was ~1,000 such copies.
class Outbox {
 public:
  void Append(absl::string_view bytes) { bytes_.Append(bytes); }
  void Append(std::string&& bytes) { bytes_.Append(std::move(bytes)); }  // adopts large strings
  void Append(absl::Cord&& bytes) { bytes_.Append(std::move(bytes)); }
  void Append(absl::CordBuffer&& block) { bytes_.Append(std::move(block)); }  // adopts the block
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  void Clear() { bytes_.Clear(); }

  // Writes as much as the non-blocking `fd` takes now and drops that part. False if the fd failed
  // (the reader is gone); true when all is written or it would block. SendTo is for sockets (no
  // SIGPIPE), WriteTo for pipes.
  bool SendTo(int fd);
  bool WriteTo(int fd);

 private:
  template <class WriteFn>
  bool Drain(WriteFn write_some);

  absl::Cord bytes_;
};

}  // namespace dtrun

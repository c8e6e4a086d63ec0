// The worker's end of the progress protocol (report_protocol.h), for native workers: sends
// reports to the socket named by DTRUN_PROGRESS_SOCKET without ever blocking (a report that does
// not fit the agent's queue is dropped). A no-op when the variable is unset (not under dtrun).
// Thread-safe.
#pragma once

#include <sys/un.h>

#include <string>

#include "base/unique_fd.h"
#include "progress/report_protocol.h"

namespace dtrun::progress {

class ProgressClient {
 public:
  // Reads DTRUN_PROGRESS_SOCKET from the environment.
  ProgressClient();
  explicit ProgressClient(const std::string& socket_path);
  bool enabled() const { return fd_.valid(); }
  void Send(const Report& report) const;
  // Announces the worker (`lang`: cpp, ...). Where Yama restricts ptrace, also lets the agent (the
  // parent) and its stack tool read this process's stacks when it is declared hung.
  // `warm`: the program calls worker::AwaitRound, so the agent may start its successors parked.
  void Hello(const std::string& lang, bool warm = false) const;
  void Beat(int64_t step, int64_t samples) const;
  void Begin(const std::string& section) const;
  void End(const std::string& section) const;
  void TotalSteps(int64_t steps) const;
  void Snapshot(int64_t step, int64_t bytes, int64_t micros) const;
  // On the way out after a failure: the state of `step` (`bytes` long) is being written into
  // memory, then is kept there or could not be.
  void Keeping(int64_t step, int64_t bytes) const;
  void Kept(int64_t step) const;
  void NotKept(int64_t step) const;
  // `source`: memory, disk or none; `step` < 0 is left out.
  void Restored(const std::string& source, int64_t step) const;
  // This rank's wait inside step `step`'s gradient all-reduce, and the step's duration.
  void Sync(int64_t step, double wait_s, double step_s) const;
  // This rank's replica fingerprint differs from the others' at `step` (hex; majority "none" if
  // there is none).
  void Diverged(int64_t step, const std::string& fingerprint, const std::string& majority) const;

 private:
  UniqueFd fd_;
  sockaddr_un addr_{};  // the agent's socket, set when fd_ is
};

// Begin on construction, end on destruction: a section closes on every way out of a scope.
class ScopedSection {
 public:
  ScopedSection(const ProgressClient& client, std::string name) : client_(client), name_(std::move(name)) {
    client_.Begin(name_);
  }
  ~ScopedSection() { client_.End(name_); }
  ScopedSection(const ScopedSection&) = delete;
  ScopedSection& operator=(const ScopedSection&) = delete;

 private:
  const ProgressClient& client_;
  std::string name_;
};

}  // namespace dtrun::progress

// Test support: run a real command (usually the dtrun binary) with captured output, read it as it
// arrives and wait for exit, every wait bounded by a deadline. No sleeps.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/child_process.h"
#include "nlohmann/json.hpp"

namespace dtrun::testing {

class Harness {
 public:
  // Starts `argv` with the test's environment plus `env` overrides. If it cannot be started, the
  // reason is in err() and Wait() returns 127.
  // With `pipe_stdin`, the command reads a pipe that WriteStdin feeds (else the test's stdin).
  explicit Harness(std::vector<std::string> argv, std::map<std::string, std::string> env = {}, bool pipe_stdin = false);
  // Writes all of `bytes` to the command's stdin pipe (false if it is closed or gone).
  bool WriteStdin(const std::string& bytes);
  void CloseStdin();

  pid_t pid() const { return proc_ ? proc_->pid() : -1; }
  // Reads output until `needle` appears in stdout+stderr; false on timeout or EOF.
  bool WaitForOutput(const std::string& needle, std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Waits for exit; returns the exit code (128 + signal if killed), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // Stops (or resumes) reading the command's stdout: a console nobody reads.
  void ReadStdout(bool read) { read_stdout_ = read; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  std::string all() const { return out_ + err_; }

 private:
  bool Pump(std::chrono::steady_clock::time_point deadline);  // false at EOF/timeout
  std::optional<ChildProcess> proc_;
  std::string out_, err_;
  bool read_stdout_ = true;
};

// Path of the built dtrun binary and of the source tree (from compile definitions).
std::string DtrunBinary();
std::string SourceDir();
std::string BinDir();
// The Python with torch (PYTHON_EXEC or /usr/bin/python3) if `import torch` works there.
std::optional<std::string> TorchPython();

// True if `pid` has exited (or never existed) within `timeout` (pidfd + poll).
bool WaitForPidExit(pid_t pid, std::chrono::milliseconds timeout);
// Runs `argv` to completion (bounded) and returns its exit code and combined output.
std::pair<int, std::string> RunToEnd(std::vector<std::string> argv,
                                     std::map<std::string, std::string> env = {});
// A worker script of the integration tests (tests/integration/workers/NAME).
std::string Worker(const std::string& name);
// The whole text of a file ("" if it cannot be read).
std::string ReadText(const std::string& path);
// The records of one kind in an event log (JSON lines; docs/DESIGN.md, "Event log").
std::vector<nlohmann::json> EventsOfKind(const std::string& events_file, const std::string& kind);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when the test process
// exits (DTRUN_KEEP_TEST_DIRS=1 keeps it).
std::string MakeTempDir();

// The worker process of global rank `rank` that `launcher` (a dtrun agent) started; 0 if none.
pid_t WorkerOf(pid_t launcher, int rank);
// A fresh demo JPEG dataset (`dtdata make-demo DIR ARGS...`, train/ and val/); the test fails if
// it cannot be made.
std::string MakeDemoDataset(const std::vector<std::string>& make_demo_args);
// `dtdata make-ratings` of `users` × `items` into a fresh temporary dir; returns the CSV's path.
std::string MakeRatings(int users, int items);
// train_recsys for 2 epochs on 3 ranks under dtrun (one restart allowed, `dtrun_flags` added),
// writing into DIR/NAME; OMP_NUM_THREADS=1 unless `env` says otherwise. Returns its exit code and
// output.
std::pair<int, std::string> RunRecsysUnderDtrun(const std::string& dir, const std::string& ratings,
                                                const std::string& name, const std::vector<std::string>& dtrun_flags,
                                                std::map<std::string, std::string> env);
// "STEPS/DIGEST" from a trainer's last line ("N optimizer steps, parameter digest X"); "" if none.
std::string StepsAndDigest(const std::string& log);
// The trainers' tests' dataset: 10 classes of 64 px JPEGs, 24 train and 8 val each (made once).
std::string TinyImageDataset();
// Whether build/bin has `name` (the LibTorch targets are absent in a build without it).
bool BinaryBuilt(const std::string& name);

}  // namespace dtrun::testing

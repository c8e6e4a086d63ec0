// Carries dtrun's stdin to the workers, so `breakpoint()`, pdb and `input()` work in a worker
// although workers run in process groups of their own (a worker reading the terminal directly
// would be stopped by job control). Each worker reads a pipe; dtrun reads its own stdin and sends
// every complete line to one worker:
//   - a worker that is prompting — it showed a partial line that began a line (pdb's "(Pdb) ",
//     input("...")) and then went quiet — gets the next line; several prompts are answered in the
//     order they appeared (the console prefix shows whose prompt it is);
//   - otherwise the rank that got the last line (a debugging session stays with its rank even
//     when the next line is typed before the prompt shows), at first local rank 0.
// End of input closes every worker's stdin. Only a pollable stdin (terminal, pipe, socket) is
// routed; a regular file or /dev/null is inherited by the workers as under torchrun. A terminal
// is read only while dtrun is in its foreground (never stopped by SIGTTIN; see docs/DESIGN.md).
// Bounded: at most kMaxBuffered bytes are held; beyond that dtrun stops reading its stdin until
// the target worker has taken its input. Not thread-safe: the agent's event loop drives it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "base/event_loop.h"
#include "base/outbox.h"
#include "base/unique_fd.h"

namespace dtrun {

class StdinRouter {
 public:
  // How dtrun's stdin reaches the workers.
  enum class Mode {
    kRouted,     // pipes fed by the router
    kInherited,  // the workers inherit dtrun's stdin (not pollable: a file, /dev/null, closed)
  };
  static Mode ModeFor(int input_fd);

  // Watches `input_fd` (dtrun's stdin) on `loop` when it is to be read, and the workers' pipes
  // while they have input waiting.
  // `input_echoed_elsewhere`: the input is a pipe from a dtrun -H launcher whose terminal echoes
  // it, so each line delivered ends the console line as a terminal's echo would.
  StdinRouter(int input_fd, EventLoop& loop, bool input_echoed_elsewhere = false);
  ~StdinRouter();
  StdinRouter(const StdinRouter&) = delete;
  StdinRouter& operator=(const StdinRouter&) = delete;

  Mode mode() const { return mode_; }
  // What the loop calls when dtrun's stdin or a worker's stdin pipe is ready.
  void OnEvent(int fd, uint32_t events);

  // A new round's workers: their stdin write ends by local rank. Replaces (closes) the last ones.
  void SetWorkers(std::map<int, UniqueFd> sinks);
  // A worker showed a prompt; the next line goes to it.
  void OnPrompt(int local_rank);
  // True once after a line from a terminal was sent on: the terminal has echoed it with its
  // newline, so the console's open line (the prompt) has ended.
  bool TakeEchoedLine() { return std::exchange(echoed_line_, false); }

  static constexpr size_t kMaxBuffered = 1 << 20;

 private:
  struct Sink {
    UniqueFd fd;
    Outbox pending;           // bytes the pipe has not taken yet
    bool registered = false;  // watched on the loop (for EPOLLOUT)
  };
  static constexpr int kDefaultRank = 0;
  void ReadInput();
  bool Takes(int rank) const;  // `rank`'s stdin is open
  int Target();  // the local rank that gets the next line; -1 if no worker takes input
  void Deliver();
  size_t LineLength(absl::string_view input) const;
  size_t SendLines(Sink& sink, absl::string_view lines);
  void WriteTo(Sink& sink);
  void UpdateInterest();
  void CloseSinksIfDone();
  void SetInterest(int fd, uint32_t events, bool& registered);

  Mode mode_;
  int input_fd_;
  EventLoop& loop_;
  bool is_terminal_ = false;
  bool echoed_ = false;            // lines sent on were echoed (a terminal here or at the launching dtrun)
  bool readable_ = true;           // false: a terminal of which dtrun is not in the foreground
  bool input_registered_ = false;  // input_fd_ is watched on the loop
  bool input_over_ = false;        // EOF or a read error (or not routed)
  bool echoed_line_ = false;
  std::string input_;  // read, not yet delivered
  std::map<int, Sink> sinks_;
  std::deque<int> prompts_;  // local ranks waiting for a line, oldest first
  int last_prompter_ = kDefaultRank;  // gets lines typed while no prompt is pending
};

}  // namespace dtrun

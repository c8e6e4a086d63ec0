// A native worker that gets stuck, for the agent's hang detection:
//   stuck_native hang RANK   reports steps 0..2 (sections and heartbeats, through
//                            progress/progress_client.h), then rank RANK blocks in BlockForever()
//                            and the others in WaitForPeers(), on the first attempt only.
//   stuck_native dstate      the worker sits in uninterruptible sleep (a vfork-style parent whose
//                            child never execs), reporting nothing, on the first attempt only.
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

#include "progress/progress_client.h"

namespace {

__attribute__((noinline)) void BlockForever() {
  for (;;) ::pause();
}

__attribute__((noinline)) void WaitForPeers() {
  int p[2];
  if (::pipe(p) != 0) abort();
  char c;
  [[maybe_unused]] ssize_t n = ::read(p[0], &c, 1);  // nobody ever writes
}

int PauseForever(void*) {
  for (;;) ::pause();
}

// clone(CLONE_VFORK) with a stack of the child's own, not vfork(): sanitizers turn vfork into fork.
__attribute__((noinline)) void SitInUninterruptibleSleep() {
  static char stack[64 << 10];
  // The child never execs, so the parent waits for it in D state.
  ::clone(PauseForever, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  const bool first_attempt = std::string(getenv("TORCHELASTIC_RESTART_COUNT") ?: "0") == "0";
  const int rank = atoi(getenv("RANK") ?: "0");
  if (argc >= 2 && strcmp(argv[1], "dstate") == 0) {
    if (first_attempt) SitInUninterruptibleSleep();
    printf("rank %d done\n", rank);
    return 0;
  }
  const int hang_rank = argc >= 3 ? atoi(argv[2]) : -1;
  dtrun::progress::ProgressClient progress;
  progress.Hello("cpp");
  for (int step = 0; step < 6; ++step) {
    progress.Begin("step");
    if (first_attempt && step == 3) {
      if (rank == hang_rank) BlockForever();
      WaitForPeers();
    }
    progress.End("step");
    progress.Beat(step, (step + 1) * 4);
  }
  printf("rank %d done\n", rank);
  return 0;
}

// A native worker that can be started parked (worker/warm_start.h), for the warm-worker tests:
//   warm_probe            parks if dtrun started it so, says it can be (hello warm=1), prints
//                         "probe rank=R restart=N pid=P park_fd=unset|set" and reports step 1;
//                         on the first attempt it then waits to be stopped; later attempts exit 0.
//   warm_probe die-parked exits 3 before parking when started parked (a warm start that fails).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "progress/progress_client.h"
#include "worker/warm_start.h"

int main(int argc, char** argv) {
  const bool die_parked = argc > 1 && std::strcmp(argv[1], "die-parked") == 0;
  if (die_parked && std::getenv("DTRUN_PARK_FD") != nullptr) return 3;
  if (absl::Status st = dtrun::worker::AwaitRound(); !st.ok()) {
    std::fprintf(stderr, "warm_probe: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  const char* rank = std::getenv("RANK");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const char* launch = std::getenv("DTRUN_LAUNCH_ID");
  std::printf("probe rank=%s restart=%s pid=%d park_fd=%s launch=%s\n", rank ? rank : "?", restart ? restart : "?",
              static_cast<int>(::getpid()), std::getenv("DTRUN_PARK_FD") ? "set" : "unset", launch ? launch : "?");
  std::fflush(stdout);
  dtrun::progress::ProgressClient reports;
  reports.Hello("cpp", dtrun::worker::ParksBeforeRounds());
  reports.Beat(1, 1);
  if (restart != nullptr && std::strcmp(restart, "0") == 0) {
    for (;;) ::pause();  // until the test kills a rank and dtrun stops the rest
  }
  return 0;
}

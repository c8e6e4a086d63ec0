#include "worker/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace dtrun::worker {
namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{SIGTERM};

void OnStop(int signo) {
  g_stop_signal.store(signo);
  g_stop_requested.store(true);
}

}  // namespace

void InstallStopSignalHandlers() {
  for (int signo : {SIGTERM, SIGUSR1, SIGUSR2}) ::signal(signo, OnStop);
}

bool StopRequested() { return g_stop_requested.load(); }
int StopSignal() { return g_stop_signal.load(); }

}  // namespace dtrun::worker

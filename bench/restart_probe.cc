// Benchmark worker for restart latency. Each worker appends "<attempt> <rank> start <ns>" to
// $PROBE_FILE when it starts. On attempts below $PROBE_RESTARTS, rank 0 waits until every rank
// of the attempt has started (inotify on the file, bounded), appends "<attempt> 0 exit <ns>" and
// exits 1; the other ranks wait to be stopped. On the last attempt every worker exits 0. Times are
// CLOCK_REALTIME, comparable across processes.
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace {

long long NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int Env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

void Record(int attempt, int rank, const char* what) {
  const char* path = std::getenv("PROBE_FILE");
  if (!path) return;
  std::string line = std::to_string(attempt) + " " + std::to_string(rank) + " " + what + " " +
                     std::to_string(NowNs()) + "\n";
  int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  ssize_t ignored = ::write(fd, line.data(), line.size());  // O_APPEND: one atomic line
  (void)ignored;
  ::close(fd);
}

int StartedIn(const char* path, int attempt) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  int a, r, n = 0;
  char what[16];
  long long ns;
  while (std::fscanf(f, "%d %d %15s %lld", &a, &r, what, &ns) == 4) n += a == attempt && what[0] == 's';
  std::fclose(f);
  return n;
}

// Waits (up to 10 s) until `world` workers of `attempt` have recorded their start.
void AwaitAllStarted(int attempt, int world) {
  const char* path = std::getenv("PROBE_FILE");
  if (!path) return;
  int fd = inotify_init1(IN_CLOEXEC);
  inotify_add_watch(fd, path, IN_MODIFY);
  for (int i = 0; i < 1000 && StartedIn(path, attempt) < world; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10) > 0) {
      char buf[4096];
      ssize_t ignored = ::read(fd, buf, sizeof(buf));
      (void)ignored;
    }
  }
  ::close(fd);
}

}  // namespace

int main() {
  const int attempt = Env("TORCHELASTIC_RESTART_COUNT", 0);
  const int rank = Env("RANK", 0);
  Record(attempt, rank, "start");
  if (attempt >= Env("PROBE_RESTARTS", 0)) return 0;
  if (rank == 0) {
    AwaitAllStarted(attempt, Env("WORLD_SIZE", 1));
    Record(attempt, rank, "exit");
    return 1;
  }
  ::pause();  // until the launcher stops the group
  return 0;
}

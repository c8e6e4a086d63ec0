#include "tests/support/file_events.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "base/unique_fd.h"

namespace dtrun::testing {

bool AwaitFiles(const std::vector<std::string>& dirs, const std::function<bool()>& done,
                std::chrono::milliseconds timeout) {
  UniqueFd events(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!events.valid()) return done();
  for (const std::string& dir : dirs) ::inotify_add_watch(events.get(), dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return done();
    pollfd p{events.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char drained[4096];
    while (::read(events.get(), drained, sizeof drained) > 0) {
    }
  }
  return true;
}

}  // namespace dtrun::testing

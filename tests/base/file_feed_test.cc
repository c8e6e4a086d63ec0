#include "base/file_feed.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

UniqueFd OpenFileWith(const std::string& content) {
  const std::string path = testing::MakeTempDir() + "/input";
  std::ofstream(path, std::ios::binary) << content;
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
}

// Everything the pipe gives until its end; "" plus a failure if it stalls for 30 s.
std::string ReadToEnd(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) != 1) {
      ADD_FAILURE() << "the pipe stalled after " << got.size() << " bytes";
      return got;
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return got;
    if (n > 0) got.append(buf, static_cast<size_t>(n));
  }
}

TEST(FileFeedTest, AFileLargerThanAPipeHoldsComesThroughWholeThenEnds) {
  std::string content;
  for (int i = 0; content.size() < 300 * 1024; ++i) content += "answer " + std::to_string(i) + "\n";
  UniqueFd file = OpenFileWith(content);
  ASSERT_TRUE(file.valid());
  ASSERT_TRUE(IsRegularFile(file.get()));
  absl::StatusOr<std::unique_ptr<FileFeed>> feed = FileFeed::Start(file.get());
  ASSERT_TRUE(feed.ok()) << feed.status();
  EXPECT_EQ(ReadToEnd((*feed)->fd()), content);
}

// Nobody reads: the thread is blocked on the full pipe, and going away must not wait for a reader
// (nor kill the process with SIGPIPE).
TEST(FileFeedTest, GoingAwayWhileThePipeIsFullEndsTheThread) {
  UniqueFd file = OpenFileWith(std::string(1 << 20, 'x'));
  absl::StatusOr<std::unique_ptr<FileFeed>> feed = FileFeed::Start(file.get());
  ASSERT_TRUE(feed.ok()) << feed.status();
  pollfd p{(*feed)->fd(), POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1);  // the thread has begun writing
  feed->reset();
  EXPECT_FALSE(IsRegularFile(-1));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_FALSE(IsRegularFile(fds[0]));
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace
}  // namespace dtrun

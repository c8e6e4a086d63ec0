#include "tests/support/suite_memo.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/support/poll.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

// The longest a test waits for another to compute: the longest a test may run (CTest's timeout,
// tests/CMakeLists.txt). A holder that dies drops its lock with its last descriptor.
constexpr std::chrono::seconds kLongestCompute(300);

// Holds an exclusive flock on `path` for its lifetime (invalid when it could not be taken).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ < 0) return;
    held_ = PollUntil([&] { return ::flock(fd_, LOCK_EX | LOCK_NB) == 0; }, kLongestCompute);
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_;
  bool held_ = false;
};

}  // namespace

std::string OncePerSuite(const std::string& key, const std::function<std::string()>& compute) {
  const char* dir = std::getenv("DTRUN_TEST_MEMO_DIR");
  if (dir == nullptr || *dir == '\0') return compute();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string value_path = std::string(dir) + "/" + key;
  FileLock lock(value_path + ".lock");
  if (!lock.held()) {
    ADD_FAILURE() << "no lock on " << value_path << ".lock within " << kLongestCompute.count() << " s; computing "
                  << key << " here";
    return compute();
  }
  std::string value = ReadText(value_path);  // "" when nobody has computed it yet
  if (!value.empty()) return value;
  value = compute();
  if (value.empty()) return value;
  const std::string partial = value_path + ".partial";
  std::ofstream(partial, std::ios::binary | std::ios::trunc) << value;
  std::filesystem::rename(partial, value_path, ec);  // whole or absent for the next reader
  return value;
}

std::string MakeSuiteDir(const std::string& key) {
  const char* dir = std::getenv("DTRUN_TEST_MEMO_DIR");
  if (dir == nullptr || *dir == '\0') return MakeTempDir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::string tmpl = std::string(dir) + "/" + key + ".XXXXXX";
  return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : MakeTempDir();
}

}  // namespace dtrun::testing

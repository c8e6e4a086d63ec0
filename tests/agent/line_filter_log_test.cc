#include "agent/line_filter_log.h"

#include <fcntl.h>

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/support/fake_root.h"

namespace dtrun {
namespace {

// A shared filtered file in a private directory, and what it holds.
class FilteredFile {
 public:
  FilteredFile()
      : path_(root_.root() + "/filtered_stdout.log"),
        fd_(std::make_shared<UniqueFd>(::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644))) {}
  std::shared_ptr<UniqueFd> fd() const { return fd_; }
  std::string Text() const {
    std::ifstream in(path_);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

 private:
  testing::FakeRoot root_;
  std::string path_;
  std::shared_ptr<UniqueFd> fd_;
};

TEST(LineFilterLogTest, MatchingLinesAreCopiedWholeWithTheirPrefixHoweverTheyArrive) {
  FilteredFile file;
  LineFilterLog log({"loss", "ERROR"}, "[default0]:", file.fd());
  log.Write("step 1 lo");
  log.Write("ss 0.5\nnoise\nERR");
  log.Write("OR: disk full\n\nlossless tail");
  log.Flush();  // the stream ended without a newline: its last line counts
  EXPECT_EQ(file.Text(), "[default0]:step 1 loss 0.5\n[default0]:ERROR: disk full\n[default0]:lossless tail\n");
}

TEST(LineFilterLogTest, RanksSharingTheFileNeverInterleaveWithinALine) {
  FilteredFile file;
  LineFilterLog a({"x"}, "[r0]:", file.fd());
  LineFilterLog b({"x"}, "[r1]:", file.fd());
  a.Write("x from a, first half ");
  b.Write("x from b\n");
  a.Write("second half\n");
  EXPECT_EQ(file.Text(), "[r1]:x from b\n[r0]:x from a, first half second half\n");
}

TEST(LineFilterLogTest, ALineLongerThanTheBoundIsJudgedInPieces) {
  FilteredFile file;
  LineFilterLog log({"needle"}, "", file.fd());
  const std::string hay(LineFilterLog::kMaxLine, 'h');
  log.Write(hay);  // a whole piece without the needle: nothing held, nothing copied
  log.Write("needle\n");
  EXPECT_EQ(file.Text(), "needle\n");
}

}  // namespace
}  // namespace dtrun

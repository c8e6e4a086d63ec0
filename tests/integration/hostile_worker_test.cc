// Workers that hand dtrun hostile files: the job still ends with its summary, promptly.
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;

// Each worker script fails after planting something in place of its error file.
TEST(HostileWorkerTest, ErrorFilesThatAreFifosDirectoriesOrIllTypedStillGiveASummary) {
  const std::vector<std::pair<std::string, std::string>> plants = {
      {"fifo", "mkfifo \"$TORCHELASTIC_ERROR_FILE\""},
      {"directory", "mkdir \"$TORCHELASTIC_ERROR_FILE\""},
      {"ill-typed", "echo '{\"message\": {\"message\": {\"message\": 5}, \"extraInfo\": {\"timestamp\": 3}}}' "
                    "> \"$TORCHELASTIC_ERROR_FILE\""},
      {"huge message", "printf '{\"message\": \"%0300000d\"}' 0 > \"$TORCHELASTIC_ERROR_FILE\""},
  };
  for (const auto& [what, plant] : plants) {
    Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c", plant + "; exit 3"});
    ASSERT_EQ(h.Wait(seconds(30)), 3) << what << ": " << h.all();
    EXPECT_NE(h.err().find("Root Cause"), std::string::npos) << what << ": " << h.all();
    EXPECT_LT(h.err().size(), 64u << 10) << what;  // a 300 KB message is not printed whole
  }
}

}  // namespace
}  // namespace dtrun::testing

// Hostile input from workers and neighbours: files planted by workers, packets to the workers'
// store. The job goes on (or ends with its summary), promptly.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/support/loopback.h"
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

TEST(HostileWorkerTest, WorkersNeverSeeTheRendezvousToken) {
  const std::string dir = MakeTempDir();
  // A worker looks everywhere it could: its environment, dtrun's command line, the registry.
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "--rdzv-token", "FLAGSECRET", "/bin/sh", "-c",
             "echo env=$DTRUN_RDZV_TOKEN; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; cat " + dir + "/*.json"},
            {{"DTRUN_RUNTIME_DIR", dir}, {"DTRUN_RDZV_TOKEN", "ENVSECRET"}});
  ASSERT_EQ(h.Wait(seconds(30)), 0) << h.all();
  EXPECT_NE(h.out().find("[default0]:env="), std::string::npos) << h.all();
  EXPECT_NE(h.out().find("--rdzv-token ***"), std::string::npos) << h.all();  // the registry's copy
  EXPECT_EQ(h.all().find("FLAGSECRET"), std::string::npos) << h.all();
  EXPECT_EQ(h.all().find("ENVSECRET"), std::string::npos) << h.all();
  EXPECT_NE(h.err().find("prefer --rdzv-token-file"), std::string::npos) << h.all();
}

template <typename T>
std::string Raw(T v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(T)); }

TEST(HostileWorkerTest, PacketsClaimingHugeSizesDoNotTakeTheStoreDown) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "1",
             SourceDir() + "/tests/integration/workers/store_waits_for_go.py"},
            {{"PYTHON_EXEC", *py}});
  ASSERT_TRUE(h.WaitForOutput(";", seconds(60))) << h.all();
  size_t at = h.out().find("PORT=");
  ASSERT_NE(at, std::string::npos) << h.all();
  const int port = std::stoi(h.out().substr(at + 5));
  // CHECK and WAIT claiming 2^30 keys with no payload (9 bytes), an unfinished 1 GiB SET, and a
  // MULTI_SET (10 without VALIDATE) claiming 2^40 pairs: each used to abort dtrun or grow it by
  // gigabytes.
  for (const std::string& packet :
       {Raw<uint8_t>(4) + Raw<uint64_t>(1ull << 30), Raw<uint8_t>(5) + Raw<uint64_t>(1ull << 30),
        Raw<uint8_t>(0) + Raw<uint64_t>(1) + "k" + Raw<uint64_t>(1ull << 30) + std::string(65536, 'x'),
        Raw<uint8_t>(10) + Raw<uint64_t>(1ull << 40)}) {
    UniqueFd fd = ConnectLoopback(port);
    ASSERT_EQ(::send(fd.get(), packet.data(), packet.size(), MSG_NOSIGNAL), static_cast<ssize_t>(packet.size()));
    char c;
    EXPECT_LE(::recv(fd.get(), &c, 1, 0), 0);  // the store closes the offender
  }
  // A well-behaved client (legacy SET "go") still gets through; the worker finishes.
  UniqueFd fd = ConnectLoopback(port);
  // LibTorch's client puts "/" before every key.
  std::string set = Raw<uint8_t>(0) + Raw<uint64_t>(3) + "/go" + Raw<uint64_t>(1) + "1";
  ASSERT_EQ(::send(fd.get(), set.data(), set.size(), MSG_NOSIGNAL), static_cast<ssize_t>(set.size()));
  EXPECT_EQ(h.Wait(seconds(60)), 0) << h.all();
  EXPECT_NE(h.out().find("STORE_SURVIVED"), std::string::npos) << h.all();
}

}  // namespace
}  // namespace dtrun::testing

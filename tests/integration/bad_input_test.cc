// Bad input: one clear line on stderr, non-zero exit, nothing started.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "gtest/gtest.h"
#include "tests/support/loopback.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

struct Case {
  std::vector<std::string> args;
  std::string mentions;
};

TEST(BadInputTest, EachMistakeGetsOneLineNamingIt) {
  std::string a_file = MakeTempDir() + "/file";  // a directory cannot be made under a file, even by root
  std::fclose(std::fopen(a_file.c_str(), "w"));
  std::string not_exec = MakeTempDir() + "/prog";
  FILE* f = std::fopen(not_exec.c_str(), "w");
  std::fclose(f);
  std::vector<Case> cases = {
      {{}, "missing the program"},
      {{"--standalone", "no_such_script.py"}, "no_such_script.py"},
      {{"--standalone", not_exec}, "not executable"},
      {{"--nproc-per-node", "0", "/bin/true"}, "--nproc-per-node"},
      {{"--nnodes", "3:2", "/bin/true"}, "MIN (3) is greater than MAX (2)"},
      {{"--node-rank", "2", "/bin/true"}, "--node-rank"},
      {{"-m", "--no-python", "pkg"}, "--module and --no-python"},
      {{"--frobnicate", "/bin/true"}, "frobnicate"},
  };
  cases.push_back({{"--log-dir", a_file + "/logs", "/bin/true"}, "--log-dir"});
  for (const Case& c : cases) {
    std::vector<std::string> argv = {DtrunBinary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Harness h(argv);
    std::optional<int> rc = h.Wait(std::chrono::seconds(30));
    EXPECT_EQ(rc, 2) << c.mentions;
    EXPECT_EQ(std::count(h.err().begin(), h.err().end(), '\n'), 1) << h.err();
    EXPECT_NE(h.err().find(c.mentions), std::string::npos) << h.err();
    EXPECT_TRUE(h.out().empty()) << h.out();
  }
}

// A launch that fails after its private directory exists reports once (main) and leaves nothing
// in the runtime directory (it used to leave the launch's directory behind).
TEST(BadInputTest, ALaunchThatCannotSetUpItsLogsLeavesNoLaunchDirectory) {
  std::string runtime = MakeTempDir();
  std::string a_file = MakeTempDir() + "/file";
  std::fclose(std::fopen(a_file.c_str(), "w"));
  Harness h({DtrunBinary(), "--log-dir", a_file + "/logs", "/bin/true"}, {{"DTRUN_RUNTIME_DIR", runtime}});
  EXPECT_EQ(h.Wait(std::chrono::seconds(30)), 2) << h.all();
  EXPECT_EQ(std::count(h.err().begin(), h.err().end(), '\n'), 1) << h.err();
  EXPECT_NE(h.err().find("--log-dir " + a_file + "/logs is not writable"), std::string::npos) << h.err();
  EXPECT_TRUE(std::filesystem::is_empty(runtime)) << std::filesystem::directory_iterator(runtime)->path();
}

TEST(BadInputTest, PortInUseIsAClearError) {
  int taken_port = 0;
  UniqueFd taken = ListenOnFreeLoopbackPort(taken_port);
  ASSERT_TRUE(taken.valid());
  std::string port = std::to_string(taken_port);
  auto [rc, out] = RunToEnd({DtrunBinary(), "--master-port", port, "/bin/true"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + port), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing

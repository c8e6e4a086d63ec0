// `dtrun completion`: the scripts the binary prints, loaded into the real shells.
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What bash's completion offers for the words `line` (the last one being completed) after
// sourcing `dtrun completion bash`.
std::string BashCompletes(const std::string& script, const std::string& line) {
  const std::string program = "source " + script +
                              "; COMP_WORDS=(" + line + "); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _dtrun;"
                              " echo \"<${COMPREPLY[*]}>\"";
  auto [rc, out] = RunToEnd({"/bin/bash", "--norc", "-c", program});
  EXPECT_EQ(rc, 0) << out;
  return out;
}

class CompletionShellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    for (const char* shell : {"bash", "zsh"}) {
      auto [rc, out] = RunToEnd({"/bin/sh", "-c", DtrunBinary() + " completion " + shell + " > " + dir_ + "/" + shell});
      ASSERT_EQ(rc, 0) << out;
    }
  }
  std::string dir_;
};

TEST_F(CompletionShellTest, BashCompletesFlagsSubcommandsAndValues) {
  const std::string s = dir_ + "/bash";
  EXPECT_THAT(BashCompletes(s, "dtrun --nproc-p"), HasSubstr("<--nproc-per-node>"));
  EXPECT_THAT(BashCompletes(s, "dtrun --nproc-per-node ''"), HasSubstr("<cpu gpu cuda xpu auto>"));
  EXPECT_THAT(BashCompletes(s, "dtrun --nproc-per-node = g"), HasSubstr("<gpu>"));  // --nproc-per-node=g
  EXPECT_THAT(BashCompletes(s, "dtrun ki"), HasSubstr("<kill>"));
  EXPECT_THAT(BashCompletes(s, "dtrun kill --sig"), HasSubstr("<--signal>"));
  EXPECT_THAT(BashCompletes(s, "dtrun kill --signal SIGK"), HasSubstr("<SIGKILL>"));
  EXPECT_THAT(BashCompletes(s, "dtrun status --js"), HasSubstr("<--json>"));
  EXPECT_THAT(BashCompletes(s, "dtrun completion z"), HasSubstr("<zsh>"));
  // After PROGRAM the words are the program's: dtrun's own flags are not offered.
  EXPECT_THAT(BashCompletes(s, "dtrun --nnodes 2 train.py --nproc"), Not(HasSubstr("--nproc-per-node")));
  EXPECT_THAT(BashCompletes(s, "dtrun --standalone train.py --nproc"), Not(HasSubstr("--nproc-per-node")));
  // A flag's value is not taken for PROGRAM.
  EXPECT_THAT(BashCompletes(s, "dtrun --nnodes 2 --nproc"), HasSubstr("--nproc-per-node"));
}

TEST_F(CompletionShellTest, ZshReadsItsScript) {
  if (::access("/bin/zsh", X_OK) != 0 && ::access("/usr/bin/zsh", X_OK) != 0) {
    GTEST_SKIP() << "zsh is not installed (scripts/install-deps.sh installs it)";
  }
  auto [rc, out] = RunToEnd({"zsh", "-n", dir_ + "/zsh"});
  EXPECT_EQ(rc, 0) << out;
  // Loaded into zsh's completion system, the function is defined for dtrun.
  auto [rc2, out2] = RunToEnd({"zsh", "-f", "-c",
                               "autoload -Uz compinit && compinit -u -D; source " + dir_ +
                                   "/zsh 2>/dev/null; compdef _dtrun dtrun; print -r -- ${_comps[dtrun]}"});
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_THAT(out2, HasSubstr("_dtrun"));
}

}  // namespace
}  // namespace dtrun::testing

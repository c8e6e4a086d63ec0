#include "launcher/completion.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

using ::testing::HasSubstr;

TEST(CompletionTest, EveryFlagOfEveryCommandIsInBothScripts) {
  std::vector<CompletedCommand> commands = DtrunCommands();
  ASSERT_GE(commands.size(), 4u);
  size_t flags = 0;
  for (const char* shell : {"bash", "zsh"}) {
    absl::StatusOr<std::string> script = CompletionScript(shell, commands);
    ASSERT_TRUE(script.ok()) << script.status();
    for (const CompletedCommand& c : commands) {
      if (!c.name.empty()) {
        EXPECT_THAT(*script, HasSubstr(c.name)) << shell;
      }
      for (const CliOption& o : c.flags) {
        for (const std::string& name : o.names) {
          EXPECT_THAT(*script, HasSubstr(name)) << shell << ": " << (c.name.empty() ? "dtrun" : c.name);
          ++flags;
        }
      }
    }
  }
  EXPECT_GT(flags, 100u);  // the launch alone has over 50 spellings
}

TEST(CompletionTest, TheLaunchKnowsWhichFlagsTakeAValue) {
  std::vector<CompletedCommand> commands = DtrunCommands();
  auto find = [&](const std::string& flag) -> const CliOption* {
    for (const CliOption& o : commands.front().flags) {
      for (const std::string& name : o.names) {
        if (name == flag) return &o;
      }
    }
    return nullptr;
  };
  ASSERT_NE(find("--nproc_per_node"), nullptr);
  EXPECT_TRUE(find("--nproc_per_node")->takes_value);
  ASSERT_NE(find("--standalone"), nullptr);
  EXPECT_FALSE(find("--standalone")->takes_value);
  ASSERT_NE(find("-r"), nullptr);
  EXPECT_TRUE(find("-r")->takes_value);
  ASSERT_NE(find("--version"), nullptr);
}

TEST(CompletionTest, ZshSpecsEscapeWhatZshWouldReadAsSyntax) {
  std::vector<CompletedCommand> commands = {{"", {{{"--odd"}, true, "brackets [x], a colon: and it's quoted"}}}};
  absl::StatusOr<std::string> script = CompletionScript("zsh", commands);
  ASSERT_TRUE(script.ok());
  EXPECT_THAT(*script, HasSubstr(R"('--odd=[brackets \[x\], a colon\: and it'\''s quoted]:value: ')"));
}

TEST(CompletionTest, AnUnknownShellIsNamedWithTheOnesThereAre) {
  EXPECT_THAT(CompletionScript("fish", DtrunCommands()),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::AllOf(HasSubstr("'fish'"), HasSubstr("bash zsh"))));
}

}  // namespace
}  // namespace dtrun

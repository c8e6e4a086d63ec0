#include "agent/output_relay.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

TEST(OutputRelayTest, PrefixesWholeLinesOnly) {
  absl::StatusOr<Pipe> p = MakePipe(false);
  ASSERT_TRUE(p.ok());
  {
    OutputRelay relay("[default1]:", p->write.get(), UniqueFd());
    relay.Write("hel");
    relay.Write("lo\nwor");
    relay.Write("ld\n\npartial");
    relay.Flush();
  }
  p->write.Reset();
  EXPECT_EQ(ReadAll(p->read.get()), "[default1]:hello\n[default1]:world\n[default1]:\n[default1]:partial\n");
}

TEST(OutputRelayTest, FileGetsRawBytesAndConsoleCanBeOff) {
  absl::StatusOr<Pipe> file = MakePipe(false);
  ASSERT_TRUE(file.ok());
  {
    OutputRelay relay("[x]:", -1, std::move(file->write));
    relay.Write("a\nb");
    relay.Flush();
  }
  EXPECT_EQ(ReadAll(file->read.get()), "a\nb");
}

TEST(OutputRelayTest, ExpandsTorchrunTemplateVariables) {
  EXPECT_EQ(ExpandPrefixTemplate("[${role_name}${local_rank}]:", "default", 5, 1), "[default1]:");
  EXPECT_EQ(ExpandPrefixTemplate("${rank}|${local_rank}|", "r", 5, 1), "5|1|");
}

}  // namespace
}  // namespace dtrun

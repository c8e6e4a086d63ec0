// HOST[:PORT] as users write endpoints: names, IPv4, IPv6 in brackets, and the mistakes named.
#include "base/endpoint.h"

#include "gtest/gtest.h"

namespace dtrun {
namespace {

TEST(EndpointTest, SplitsHostAndPortWithTheDefaultWhereNoneIsGiven) {
  using Ep = std::pair<std::string, int>;
  EXPECT_EQ(ParseEndpoint("node0:29400", 1).value(), Ep("node0", 29400));
  EXPECT_EQ(ParseEndpoint("10.0.0.1", 29500).value(), Ep("10.0.0.1", 29500));
  EXPECT_EQ(ParseEndpoint("[fd00::1]:29511", 1).value(), Ep("fd00::1", 29511));
  EXPECT_EQ(ParseEndpoint("[fd00::1]", 29400).value(), Ep("fd00::1", 29400));
  EXPECT_EQ(ParseEndpoint("host:0", 1).value(), Ep("host", 0));
}

TEST(EndpointTest, FormattingBracketsIpv6AndParsesBack) {
  EXPECT_EQ(FormatEndpoint("node0", 29400), "node0:29400");
  EXPECT_EQ(FormatEndpoint("fd00::1", 29511), "[fd00::1]:29511");
  for (const std::string host : {"node0", "10.0.0.1", "fd00::1"}) {
    EXPECT_EQ(ParseEndpoint(FormatEndpoint(host, 7), 1).value(), std::make_pair(host, 7));
  }
}

TEST(EndpointTest, MistakesAreNamedWithTheValue) {
  for (const char* bad : {"[fd00::1:29400", "host:http", "host:65536", "host:-1", ":29400", ""}) {
    absl::StatusOr<std::pair<std::string, int>> ep = ParseEndpoint(bad, 1);
    ASSERT_FALSE(ep.ok()) << bad;
    EXPECT_EQ(ep.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(ep.status().message().find(std::string("endpoint '") + bad + "'"), std::string::npos) << ep.status();
  }
}

}  // namespace
}  // namespace dtrun

// The release message of warm workers (base/park_message.h): what the agent writes is what the
// worker reads, and a reader bounds and checks what it is given.
#include "base/park_message.h"

#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun {
namespace {

absl::StatusOr<std::vector<std::string>> RoundTrip(const std::string& message) {
  const size_t nl = message.find('\n');
  if (nl == std::string::npos) return absl::InvalidArgumentError("no header");
  absl::StatusOr<size_t> n = DecodeReleaseSize(message.substr(0, nl));
  if (!n.ok()) return n.status();
  if (message.size() - nl - 1 != *n) return absl::InvalidArgumentError("size");
  return DecodeReleaseEnv(message.substr(nl + 1));
}

TEST(ParkMessageTest, TheEnvironmentComesBackAsSent) {
  const std::vector<std::string> env = {"RANK=3", "MASTER_ADDR=10.0.0.1", "EMPTY=", "WITH_EQUALS=a=b"};
  absl::StatusOr<std::vector<std::string>> got = RoundTrip(EncodeRelease(env));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, env);
  got = RoundTrip(EncodeRelease({}));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
}

TEST(ParkMessageTest, AHeaderThatIsNotASmallCountIsRefused) {
  for (const char* bad : {"", "-1", "12x", " 12", "99999999999999", "1048577"}) {
    EXPECT_THAT(DecodeReleaseSize(bad), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                                   ::testing::HasSubstr("must start with its size")))
        << bad;
  }
  EXPECT_EQ(*DecodeReleaseSize("1048576"), kMaxReleaseBytes);
}

TEST(ParkMessageTest, EntriesThatAreNotNameEqualsValueAreRefused) {
  using namespace std::string_literals;
  for (const std::string& bad : {"RANK=1"s, "RANK\0"s, "=1\0"s, "A=1\0\0"s}) {
    absl::StatusOr<std::vector<std::string>> got = DecodeReleaseEnv(bad);
    EXPECT_THAT(got, ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("release")))
        << bad;
  }
}

}  // namespace
}  // namespace dtrun

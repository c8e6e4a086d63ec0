// gmock matchers for absl::Status and absl::StatusOr<T>: a test names the code it expects and what
// the message must say, not just "not OK".
//   EXPECT_THAT(ParseNnodes("0"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--nnodes")));
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace dtrun::testing {

inline const absl::Status& StatusOf(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher)) {
  const absl::Status& status = StatusOf(arg);
  if (status.code() != code) {
    *result_listener << "whose code is " << absl::StatusCodeToString(status.code()) << " (" << status.message() << ")";
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher, std::string(status.message()), result_listener);
}

}  // namespace dtrun::testing

// A C++ trainer's last words (worker/error_record.h): torchelastic's record, which torchrun reads
// too, written where the launcher said, and never a reason for the exit to go wrong.
#include "worker/error_record.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/env_names.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrun::worker {
namespace {

TEST(ErrorRecordTest, IsTorchelasticsRecordWithWholeSeconds) {
  nlohmann::json j = nlohmann::json::parse(ErrorRecordJson("c10::Error: boom", "frame #0", 1700000000123));
  const nlohmann::json& extra = j["message"]["extraInfo"];
  EXPECT_EQ(j["message"]["message"], "c10::Error: boom");
  EXPECT_EQ(extra["py_callstack"], "frame #0");
  // torchrun reads the timestamp with int(): a string of whole seconds.
  EXPECT_EQ(extra["timestamp"], "1700000000");
}

TEST(ErrorRecordTest, NoCallstackIsTheMessageAndBadUtf8IsReplaced) {
  nlohmann::json j = nlohmann::json::parse(ErrorRecordJson("bad \xff byte", "", 5000));
  const std::string message = j["message"]["message"];
  EXPECT_EQ(message.find('\xff'), std::string::npos);
  EXPECT_EQ(message.rfind("bad ", 0), 0u);
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], message);
}

class ScopedErrorFile {
 public:
  explicit ScopedErrorFile(const std::string& path) { ::setenv(env::kErrorFile, path.c_str(), 1); }
  ~ScopedErrorFile() { ::unsetenv(env::kErrorFile); }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ErrorRecordTest, ReportWritesTheFileTheEnvironmentNamesAndTheLineOnStderr) {
  const std::string path = ::testing::TempDir() + "/error_record_test.json";
  std::remove(path.c_str());
  ScopedErrorFile env(path);
  ::testing::internal::CaptureStderr();
  ReportFatalError("train_imagenet", "--resume x: no such checkpoint file");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "train_imagenet: --resume x: no such checkpoint file\n");
  nlohmann::json j = nlohmann::json::parse(Slurp(path));
  EXPECT_EQ(j["message"]["message"], "--resume x: no such checkpoint file");
  // A second error is a consequence of the first: on stderr, not over the record.
  ::testing::internal::CaptureStderr();
  ReportFatalError("train_imagenet", "the validation set is missing too");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "train_imagenet: the validation set is missing too\n");
  EXPECT_EQ(nlohmann::json::parse(Slurp(path))["message"]["message"], "--resume x: no such checkpoint file");
}

TEST(ErrorRecordTest, AnUnwritableFileIsOneMoreLineAndNothingElse) {
  ScopedErrorFile env("/nonexistent-dir/error.json");
  ::testing::internal::CaptureStderr();
  ReportFatalError("train_recsys", "boom");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("train_recsys: boom\n"), std::string::npos) << err;
  EXPECT_NE(err.find("the error file was not written"), std::string::npos) << err;
}

TEST(ErrorRecordTest, WithoutALauncherOnlyStderrIsWritten) {
  ::unsetenv(env::kErrorFile);
  ::testing::internal::CaptureStderr();
  ReportFatalError("train_imagenet", "boom");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "train_imagenet: boom\n");
}

}  // namespace
}  // namespace dtrun::worker

// A private directory standing in for "/" (its /proc and /sys files written by the test), for
// code that reads the kernel's files under a root it is given. Removed with the object.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace dtrun::testing {

class FakeRoot {
 public:
  FakeRoot() {
    std::string pattern = ::testing::TempDir() + "/rootXXXXXX";
    root_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~FakeRoot() { std::filesystem::remove_all(root_); }
  FakeRoot(const FakeRoot&) = delete;
  FakeRoot& operator=(const FakeRoot&) = delete;
  // `path` is absolute under the root ("/proc/vmstat"); its directories are made.
  void Write(const std::string& path, const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

}  // namespace dtrun::testing

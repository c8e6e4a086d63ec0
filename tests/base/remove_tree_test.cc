#include "base/remove_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

TEST(RemoveTreeTest, RemovesFilesAndDirsDepthFirstWithoutFollowingLinks) {
  const std::string base = testing::MakeTempDir();
  const std::string outside = base + "/outside.txt";
  std::ofstream(outside) << "kept";
  const std::string tree = base + "/tree";
  ASSERT_EQ(::mkdir(tree.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((tree + "/a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((tree + "/a/b").c_str(), 0755), 0);
  std::ofstream(tree + "/a/b/file") << "x";
  std::ofstream(tree + "/top") << "y";
  ASSERT_EQ(::symlink(outside.c_str(), (tree + "/a/link").c_str()), 0);
  ASSERT_EQ(::symlink(base.c_str(), (tree + "/a/dirlink").c_str()), 0);

  EXPECT_TRUE(RemoveTree(tree));
  EXPECT_FALSE(Exists(tree));
  EXPECT_TRUE(Exists(outside)) << "a link's target is not removed";
}

TEST(RemoveTreeTest, AFileIsRemovedAndNothingThereIsSuccess) {
  const std::string file = testing::MakeTempDir() + "/f";
  std::ofstream(file) << "z";
  EXPECT_TRUE(RemoveTree(file));
  EXPECT_FALSE(Exists(file));
  EXPECT_TRUE(RemoveTree(file)) << "already gone";
}

}  // namespace
}  // namespace dtrun

#include "worker/data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/worker/data/data_test_util.h"
#include "worker/data/resample_rows.h"

namespace dtrun::data {
namespace {

using dtrun::testing::MakeTempDir;
using dtrun::testing::RunToEnd;
using dtrun::testing::TorchPython;
using testing::Jpeg;
using testing::WriteFile;

// Class and file names that sort differently under naive rules.
std::string TrickyTree() {
  std::string root = MakeTempDir() + "/tricky";
  const char* classes[] = {"b", "B", "a b", "a-b", "a_b", "n10", "n9", "Z", "é", "10", "1"};
  int i = 0;
  for (const char* c : classes) {
    std::string dir = root + "/" + c;
    WriteFile(dir + "/img" + std::to_string(i) + ".JPG", Jpeg(8, 8));
    WriteFile(dir + "/Img" + std::to_string(i) + ".jpeg", Jpeg(8, 8));
    WriteFile(dir + "/sub-x/a.png", Jpeg(8, 8));
    WriteFile(dir + "/sub/deeper/z.jpg", Jpeg(8, 8));
    WriteFile(dir + "/sub/b.jpg", Jpeg(8, 8));
    WriteFile(dir + "/notes.txt", "not an image");
    ++i;
  }
  return root;
}

TEST(ImageFolderTest, ClassesAndSamplesInTorchvisionOrder) {
  std::string root = TrickyTree();
  auto ds = OpenImageFolder(root);
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "python3-torchvision not available to compare with";
  auto [rc, out] = RunToEnd({*py, "-c",
                             "import sys\n"
                             "from torchvision.datasets.folder import make_dataset, find_classes\n"
                             "c, idx = find_classes(sys.argv[1])\n"
                             "print('\\n'.join(c))\n"
                             "print('--')\n"
                             "for p, t in make_dataset(sys.argv[1], idx, extensions=('.jpg','.jpeg','.png','.ppm','.bmp','.pgm','.tif','.tiff','.webp')):\n"
                             "    print(f'{t} {p}')\n",
                             root});
  ASSERT_EQ(rc, 0) << out;
  std::string ours;
  for (const std::string& c : (*ds)->classes()) ours += c + "\n";
  ours += "--\n";
  for (size_t i = 0; i < (*ds)->size(); ++i) ours += std::to_string((*ds)->label(i)) + " " + (*ds)->Describe(i) + "\n";
  EXPECT_EQ(ours, out);
}

TEST(ImageFolderTest, MissingOrEmptyRootsAreClearErrors) {
  EXPECT_EQ(OpenImageFolder("/nonexistent/data").status().code(), absl::StatusCode::kNotFound);
  std::string empty = MakeTempDir();
  EXPECT_EQ(OpenImageFolder(empty).status().code(), absl::StatusCode::kInvalidArgument);
  WriteFile(empty + "/full/a.jpg", Jpeg(8, 8));
  std::filesystem::create_directories(empty + "/hollow");
  auto st = OpenImageFolder(empty).status();  // as torchvision: a class without images is an error
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("hollow"), std::string::npos) << st;
}

TEST(TarShardsTest, ShardsGiveTheSameSamplesAsTheFolder) {
  std::string root = MakeTempDir() + "/folder";
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 5; ++i) WriteFile(root + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg", Jpeg(16, 12, c * 10 + i));
  }
  auto folder = OpenImageFolder(root);
  ASSERT_TRUE(folder.ok());
  std::string shards = MakeTempDir() + "/shards";
  PackOptions o;
  o.samples_per_shard = 4;
  ASSERT_EQ(PackShards(**folder, shards, o).value(), 15u);
  for (bool with_index : {true, false}) {
    if (!with_index) std::filesystem::remove(shards + "/index.tsv");
    auto tar = OpenDataset(shards);
    ASSERT_TRUE(tar.ok()) << tar.status();
    ASSERT_EQ((*tar)->size(), 15u);
    EXPECT_EQ((*tar)->classes(), (*folder)->classes());
    for (size_t i = 0; i < 15; ++i) {
      EXPECT_EQ((*tar)->label(i), (*folder)->label(i));
      EXPECT_EQ((*tar)->ReadBytes(i).value(), (*folder)->ReadBytes(i).value()) << i;
    }
  }
}

// Packs 3 classes × 5 images into shards of 4 samples; returns the shard dir.
std::string PackedShards() {
  std::string root = MakeTempDir() + "/folder";
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 5; ++i) WriteFile(root + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg", Jpeg(16, 12, c * 10 + i));
  }
  auto folder = OpenImageFolder(root);
  std::string shards = MakeTempDir() + "/shards";
  PackOptions o;
  o.samples_per_shard = 4;
  EXPECT_EQ(PackShards(**folder, shards, o).value(), 15u);
  return shards;
}

TEST(TarShardsTest, IndexLinesClaimingMoreThanTheShardHoldsAreRefusedNotAllocated) {
  for (const std::string claim : {"68719476736", "1099511627776"}) {  // 64 GiB, 1 TiB
    std::string shards = PackedShards();
    std::ifstream in(shards + "/index.tsv");
    std::string first;
    std::getline(in, first);
    std::vector<std::string> f = absl::StrSplit(first, '\t');
    WriteFile(shards + "/index.tsv", f[0] + "\t" + f[1] + "\t" + f[2] + "\t" + claim + "\t" + f[4] + "\n");
    auto tar = OpenDataset(shards);
    ASSERT_FALSE(tar.ok());
    EXPECT_NE(tar.status().message().find("index.tsv line 1"), absl::string_view::npos) << tar.status();
    EXPECT_NE(tar.status().message().find("delete index.tsv"), absl::string_view::npos) << tar.status();
  }
}

TEST(TarShardsTest, ATruncatedShardIsReadUpToTheDamage) {
  std::string shards = PackedShards();
  std::filesystem::remove(shards + "/index.tsv");
  std::vector<std::filesystem::path> tars;
  for (auto& e : std::filesystem::directory_iterator(shards)) {
    if (e.path().extension() == ".tar") tars.push_back(e.path());
  }
  std::sort(tars.begin(), tars.end());
  std::filesystem::resize_file(tars[0], std::filesystem::file_size(tars[0]) / 2);  // 4 samples → ~2
  auto tar = OpenDataset(shards);
  ASSERT_TRUE(tar.ok()) << tar.status();  // was: the whole dataset refused ("has no .cls label")
  EXPECT_GE((*tar)->size(), 11u);
  EXPECT_LT((*tar)->size(), 15u);
  for (size_t i = 0; i < (*tar)->size(); ++i) EXPECT_TRUE((*tar)->ReadBytes(i).ok()) << i;
}

// A member header claiming 2 GiB (a label, then an image): no allocation, the shard is reported.
TEST(TarShardsTest, MemberHeadersClaimingHugeSizesAreNotAllocated) {
  for (const char* member : {"0.cls", "0.jpg"}) {
    std::string shards = PackedShards();
    std::filesystem::remove(shards + "/index.tsv");
    std::string first = shards + "/shard-000000.tar";
    std::fstream tar(first, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(tar)), std::istreambuf_iterator<char>());
    size_t at = 0;
    // The first header (512-byte aligned) whose name ends with `member`.
    while (at < bytes.size() && !absl::EndsWith(std::string(bytes.data() + at, strnlen(bytes.data() + at, 100)), member)) {
      at += 512;
    }
    ASSERT_LT(at, bytes.size()) << member;
    tar.seekp(static_cast<std::streamoff>(at + 124));
    tar.write("17777777777", 11);  // octal: 2 GiB - 1, far past the file
    tar.close();
    auto ds = OpenDataset(shards);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_LT((*ds)->size(), 15u) << member;
  }
}

TEST(DtdataTest, OutOfRangeFlagsAreOneLineErrorsAndWriteNothing) {
  const std::string out = MakeTempDir() + "/never";
  const std::vector<std::vector<std::string>> bad = {
      {"make-demo", out, "--classes", "0"},     {"make-demo", out, "--quality", "200"},
      {"make-demo", out, "--size", "-5"},       {"pack", out, out + "2", "--per-shard", "0"},
      {"pack", out, out + "2", "--per-shard", "-1"}, {"bench", out, "--threads", "0"},
      {"bench", out, "--batch-size", "-1"},     {"bench", out, "--image-size", "0"},
  };
  for (std::vector<std::string> argv : bad) {
    argv.insert(argv.begin(), dtrun::testing::BinDir() + "/dtdata");
    auto [rc, text] = RunToEnd(argv);
    EXPECT_EQ(rc, 2) << argv[1] << " " << argv.back() << ": " << text;
    EXPECT_NE(text.find("dtdata: error: --"), std::string::npos) << text;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// `dtdata bench` is what docs/BENCHMARKS.md and the GPU check (bench/gpu/report.py) read a loader
// thread's time from: its line keeps the keys they parse, and names the resampler's build.
TEST(DtdataTest, BenchReportsALoaderThreadsTimeAndTheResamplersBuild) {
  std::string root = MakeTempDir() + "/folder";
  for (int i = 0; i < 8; ++i)
    WriteFile(root + "/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".jpg", Jpeg(80, 60, i));
  auto [rc, text] = RunToEnd({dtrun::testing::BinDir() + "/dtdata", "bench", root, "--threads", "1", "--batch-size",
                              "4", "--batches", "3", "--image-size", "32"});
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("images=12 "), std::string::npos) << text;
  EXPECT_NE(text.find("skipped=0 "), std::string::npos) << text;
  EXPECT_NE(text.find("loader_ms_per_image="), std::string::npos) << text;
  EXPECT_NE(text.find(std::string("resampler=") + FastestRowResampler().isa + "\n"), std::string::npos) << text;
}

// The first of four shards cannot be written (a link to /dev/full: every write is ENOSPC). The
// error used to be lost: only the last shard's stream was checked.
TEST(TarShardsTest, AWriteErrorInAnyShardIsReportedWithItsName) {
  std::string root = MakeTempDir() + "/folder";
  for (int i = 0; i < 12; ++i) WriteFile(root + "/c0/" + std::to_string(i) + ".jpg", Jpeg(16, 12, i));
  auto folder = OpenImageFolder(root);
  ASSERT_TRUE(folder.ok());
  std::string shards = MakeTempDir() + "/shards";
  std::filesystem::create_directories(shards);
  ASSERT_EQ(::symlink("/dev/full", (shards + "/shard-000000.tar").c_str()), 0);
  PackOptions o;
  o.samples_per_shard = 4;
  absl::StatusOr<size_t> n = PackShards(**folder, shards, o);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("shard-000000.tar failed (No space left on device)"), absl::string_view::npos)
      << n.status();
}

TEST(DtdataTest, VerifyHonoursThePixelBudget) {
  std::string root = MakeTempDir() + "/folder";
  WriteFile(root + "/c0/a.jpg", Jpeg(64, 64));
  const std::string dtdata = dtrun::testing::BinDir() + "/dtdata";
  EXPECT_EQ(RunToEnd({dtdata, "verify", root}).first, 0);
  auto [rc, text] = RunToEnd({dtdata, "verify", root, "--max-image-pixels", "1024"});
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("64x64"), std::string::npos) << text;
  EXPECT_NE(text.find("over the decode budget"), std::string::npos) << text;
}

// A class folder this user cannot read is named as such (it was reported as "no images"). Run as
// an unprivileged user, since root reads everything.
TEST(ImageFolderTest, AnUnreadableClassFolderIsNamedNotCalledEmpty) {
  if (::geteuid() != 0 || RunToEnd({"setpriv", "--version"}).first != 0) GTEST_SKIP() << "needs root and setpriv";
  std::string base = MakeTempDir();
  std::string root = base + "/folder";
  WriteFile(root + "/a/0.jpg", Jpeg(16, 16));
  WriteFile(root + "/b/0.jpg", Jpeg(16, 16));
  for (const std::string& d : {base, root, root + "/a"}) ::chmod(d.c_str(), 0755);
  ::chmod((root + "/a/0.jpg").c_str(), 0644);
  ::chmod((root + "/b").c_str(), 0700);  // root's only
  auto [rc, text] = RunToEnd({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              dtrun::testing::BinDir() + "/dtdata", "verify", root});
  EXPECT_NE(rc, 0) << text;
  EXPECT_NE(text.find("cannot read folder " + root + "/b: Permission denied"), std::string::npos) << text;
  EXPECT_EQ(text.find("no images"), std::string::npos) << text;
}

TEST(TarShardsTest, PackCanPreResizeToAShorterSide) {
  std::string root = MakeTempDir() + "/folder";
  WriteFile(root + "/c/0.jpg", Jpeg(400, 200));
  auto folder = OpenImageFolder(root);
  std::string shards = MakeTempDir() + "/shards";
  PackOptions o;
  o.resize_shorter_side = 100;
  ASSERT_TRUE(PackShards(**folder, shards, o).ok());
  auto tar = OpenDataset(shards);
  ASSERT_TRUE(tar.ok());
  std::string bytes = (*tar)->ReadBytes(0).value();
  auto img = testing::Noise(1, 1, 1);  // silence unused warnings in some builds
  (void)img;
  EXPECT_LT(bytes.size(), (*folder)->ReadBytes(0)->size());
}

}  // namespace
}  // namespace dtrun::data

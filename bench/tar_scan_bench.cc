// Scanning tar shards without an index: dtrun's reader (worker/data/tar_shards.cc, headers only,
// every size bounds-checked) against libarchive reading the same headers and skipping the data.
//   tar_scan_bench SHARD_DIR [REPEATS]   (a folder from `dtdata pack`, index.tsv removed)
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "worker/data/dataset.h"

namespace {

using Clock = std::chrono::steady_clock;

size_t LibarchiveScan(const std::vector<std::string>& shards) {
  size_t images = 0;
  for (const std::string& path : shards) {
    archive* a = archive_read_new();
    archive_read_support_format_tar(a);
    if (archive_read_open_filename(a, path.c_str(), 1 << 16) != ARCHIVE_OK) {
      std::fprintf(stderr, "libarchive: %s\n", archive_error_string(a));
      archive_read_free(a);
      continue;
    }
    archive_entry* e;
    char label[64];
    while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
      std::string name = archive_entry_pathname(e);
      images += name.size() > 4 && name.compare(name.size() - 4, 4, ".jpg") == 0;
      // As ours: the small .cls labels are read, image data is skipped.
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".cls") == 0) {
        archive_read_data(a, label, sizeof(label));
      } else {
        archive_read_data_skip(a);
      }
    }
    archive_read_free(a);
  }
  return images;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tar_scan_bench SHARD_DIR [REPEATS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<std::string> shards;
  for (auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".tar") shards.push_back(e.path().string());
  }
  std::sort(shards.begin(), shards.end());
  std::vector<double> ours, theirs;
  size_t n_ours = 0, n_theirs = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    auto ds = dtrun::data::OpenTarShards(dir);
    n_ours = ds.ok() ? (*ds)->size() : 0;
    auto t1 = Clock::now();
    n_theirs = LibarchiveScan(shards);
    auto t2 = Clock::now();
    ours.push_back(std::chrono::duration<double>(t1 - t0).count());
    theirs.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  std::sort(ours.begin(), ours.end());
  std::sort(theirs.begin(), theirs.end());
  std::printf("shards=%zu images: ours=%zu libarchive=%zu  median scan: ours %.4f s, libarchive %.4f s\n",
              shards.size(), n_ours, n_theirs, ours[ours.size() / 2], theirs[theirs.size() / 2]);
  return 0;
}

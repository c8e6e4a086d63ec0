// Labelled image sources behind one interface: an ImageFolder tree, tar shards (with an index),
// or synthetic images. Reading a sample returns its encoded bytes; decoding is the loader's job.
// Implementations are safe for concurrent ReadBytes calls.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  virtual int label(size_t index) const = 0;
  virtual const std::vector<std::string>& classes() const = 0;
  // The encoded image. NotFound/DataLoss if it cannot be read.
  virtual absl::StatusOr<std::string> ReadBytes(size_t index) const = 0;
  // A name for messages (path or shard:key).
  virtual std::string Describe(size_t index) const = 0;
  // Synthetic sources produce pixels directly (ReadBytes is then Unimplemented).
  virtual bool synthetic() const { return false; }
};

// `root/<class>/**/<image>` exactly as torchvision.datasets.ImageFolder: classes are the sorted
// sub-directory names (index = position), files are walked in sorted order, following symlinks,
// keeping the extensions torchvision accepts (case-insensitive). NotFound if `root` is missing,
// InvalidArgument if it has no class folder or no image.
absl::StatusOr<std::unique_ptr<Dataset>> OpenImageFolder(const std::string& root);

// A directory of `*.tar` shards of `<key>.jpg` (or .jpeg/.png) + `<key>.cls` members, with the
// `index.tsv` and `classes.txt` that PackShards writes (without them the tars are scanned).
absl::StatusOr<std::unique_ptr<Dataset>> OpenTarShards(const std::string& dir);

// Opens `path` as shards if it holds *.tar files, else as an ImageFolder.
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& path);

// `size` random images of `classes` classes (labels = index % classes); pixels come from
// SyntheticPixels.
std::unique_ptr<Dataset> MakeSyntheticDataset(size_t size, int classes);

struct PackOptions {
  size_t samples_per_shard = 1000;
  int resize_shorter_side = 0;  // > 0: re-encode every image with this shorter side (quality 90)
};
// Writes `src` as tar shards + index.tsv + classes.txt into `out_dir`. Returns samples written.
absl::StatusOr<size_t> PackShards(const Dataset& src, const std::string& out_dir, const PackOptions& options);

}  // namespace dtrun::data

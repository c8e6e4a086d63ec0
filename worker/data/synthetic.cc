#include "absl/strings/str_cat.h"
#include "worker/data/dataset.h"

namespace dtrun::data {
namespace {

class Synthetic : public Dataset {
 public:
  Synthetic(size_t size, int classes) : size_(size) {
    for (int c = 0; c < classes; ++c) classes_.push_back(absl::StrCat("class", c));
  }
  size_t size() const override { return size_; }
  int label(size_t i) const override { return static_cast<int>(i % classes_.size()); }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::string Describe(size_t i) const override { return absl::StrCat("synthetic:", i); }
  absl::StatusOr<std::string> ReadBytes(size_t) const override {
    return absl::UnimplementedError("synthetic samples have no encoded bytes");
  }
  bool synthetic() const override { return true; }

 private:
  size_t size_;
  std::vector<std::string> classes_;
};

}  // namespace

std::unique_ptr<Dataset> MakeSyntheticDataset(size_t size, int classes) {
  return std::make_unique<Synthetic>(size, classes > 0 ? classes : 1);
}

}  // namespace dtrun::data

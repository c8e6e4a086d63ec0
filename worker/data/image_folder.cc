#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/data/dataset.h"
#include "base/status_macros.h"

namespace dtrun::data {
namespace {

namespace fs = std::filesystem;

// torchvision.datasets.folder.IMG_EXTENSIONS
bool IsImageFile(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  for (const char* ext : {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}) {
    if (lower.size() > std::strlen(ext) && lower.compare(lower.size() - std::strlen(ext), std::string::npos, ext) == 0) {
      return true;
    }
  }
  return false;
}

// Every directory under `dir` (itself included, symlinks followed) with its image files. A
// folder that cannot be read is an error naming it (it used to pass for a folder with no images).
absl::Status Walk(const fs::path& dir, std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  std::vector<std::string> files;
  std::vector<fs::path> dirs;
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read folder ", dir.string(), ": ", ec.message(), "; check its permissions"));
  }
  for (const auto& e : it) {
    std::string name = e.path().filename().string();
    if (e.is_directory(ec)) {
      dirs.push_back(e.path());
    } else if (IsImageFile(name)) {
      files.push_back(name);
    }
  }
  std::sort(files.begin(), files.end());
  out->emplace_back(dir.string(), std::move(files));
  for (const fs::path& d : dirs) {
    DT_RETURN_IF_ERROR(Walk(d, out));
  }
  return absl::OkStatus();
}

// torchvision: `for root, _, fnames in sorted(os.walk(class_dir, followlinks=True))`, then
// `sorted(fnames)`: directories in the string order of their paths, not depth-first.
absl::Status ImagesOf(const fs::path& class_dir, std::vector<std::string>* out) {
  std::vector<std::pair<std::string, std::vector<std::string>>> dirs;
  DT_RETURN_IF_ERROR(Walk(class_dir, &dirs));
  std::sort(dirs.begin(), dirs.end());
  for (const auto& [root, files] : dirs) {
    for (const std::string& f : files) out->push_back(root + "/" + f);
  }
  return absl::OkStatus();
}

class ImageFolder : public Dataset {
 public:
  ImageFolder(std::vector<std::string> classes, std::vector<std::string> paths, std::vector<int> labels)
      : classes_(std::move(classes)), paths_(std::move(paths)), labels_(std::move(labels)) {}
  size_t size() const override { return paths_.size(); }
  int label(size_t i) const override { return labels_[i]; }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::string Describe(size_t i) const override { return paths_[i]; }
  absl::StatusOr<std::string> ReadBytes(size_t i) const override {
    std::ifstream in(paths_[i], std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", paths_[i]));
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int> labels_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenImageFolder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrCat("dataset folder ", root, " does not exist; make one with `dtdata make-demo`"));
  }
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root, fs::directory_options::follow_directory_symlink, ec)) {
    if (e.is_directory(ec)) classes.push_back(e.path().filename().string());
  }
  std::sort(classes.begin(), classes.end());  // byte order = Python's sorted() on str for UTF-8
  if (classes.empty()) return absl::InvalidArgumentError(absl::StrCat(root, " has no class folders (expected root/<class>/<image>)"));
  std::vector<std::string> paths;
  std::vector<int> labels;
  std::vector<std::string> empty;
  for (size_t c = 0; c < classes.size(); ++c) {
    size_t before = paths.size();
    DT_RETURN_IF_ERROR(ImagesOf(fs::path(root) / classes[c], &paths));
    labels.insert(labels.end(), paths.size() - before, static_cast<int>(c));
    if (paths.size() == before) empty.push_back(classes[c]);
  }
  if (!empty.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(root, ": no images in class folder(s) ", absl::StrJoin(empty, ", "),
                                                   " (as torchvision, every class needs an image)"));
  }
  return std::unique_ptr<Dataset>(new ImageFolder(std::move(classes), std::move(paths), std::move(labels)));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      if (e.path().extension() == ".tar") return OpenTarShards(path);
    }
  }
  return OpenImageFolder(path);
}

}  // namespace dtrun::data

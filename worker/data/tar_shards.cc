// Tar shards: the object-store layout ("split the DB into ~1000 tars") of `<key>.jpg` + `<key>.cls`
// members, plus index.tsv (shard, key, data offset, size, label) and classes.txt.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "spdlog/spdlog.h"
#include "base/status_macros.h"
#include "worker/data/dataset.h"
#include "worker/data/decode.h"
#include "worker/data/encode.h"

namespace dtrun::data {
namespace {

namespace fs = std::filesystem;
constexpr size_t kBlock = 512;

struct Entry {
  int shard = 0;
  std::string key;
  uint64_t offset = 0;
  uint64_t size = 0;
  int label = 0;
};

uint64_t ParseOctal(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n && p[i]; ++i) {
    if (p[i] >= '0' && p[i] <= '7') v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  return v;
}

std::string TarHeader(const std::string& name, uint64_t size) {
  char h[kBlock] = {};
  std::snprintf(h, 100, "%s", name.c_str());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(size));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar\0" "00", 8);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);
  return std::string(h, kBlock);
}

// Members larger than this are not images (and would be read whole into memory).
constexpr uint64_t kMaxMemberBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxLabelBytes = 64;

uint64_t FileSize(const std::string& path) {
  std::error_code ec;
  uint64_t size = fs::file_size(path, ec);
  return ec ? 0 : size;
}

// Scans one tar's headers (no image data read) into image entries; labels come from the .cls
// members. Every size a header claims is checked against the file: a truncated shard is read up
// to the damage, and what lies beyond it is reported, not allocated.
absl::Status ScanTar(const std::string& path, int shard, std::vector<Entry>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read shard ", path));
  const uint64_t file_size = FileSize(path);
  std::map<std::string, Entry> images;
  std::map<std::string, int> labels;
  char h[kBlock];
  uint64_t pos = 0;
  std::string damage;  // why the scan stopped early
  while (in.read(h, kBlock)) {
    if (h[0] == '\0') break;
    std::string name(h, strnlen(h, 100));
    if (std::memcmp(h + 257, "ustar", 5) == 0 && h[345]) name = std::string(h + 345, strnlen(h + 345, 155)) + "/" + name;
    uint64_t size = ParseOctal(h + 124, 12);
    uint64_t data = pos + kBlock;
    if (size > file_size || data + size > file_size) {
      damage = absl::StrCat("member ", name, " claims ", size, " bytes at offset ", data, " but the file has ",
                            file_size, " (truncated or corrupt)");
      break;
    }
    size_t dot = name.rfind('.');
    std::string key = name.substr(0, dot), ext = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (ext == "cls" && size <= kMaxLabelBytes) {
      std::string v(size, '\0');
      in.read(v.data(), static_cast<std::streamsize>(size));
      int label = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &label) && label >= 0) labels[key] = label;
    } else if ((ext == "jpg" || ext == "jpeg" || ext == "png") && size <= kMaxMemberBytes) {
      images[key] = Entry{shard, key, data, size, 0};
    }
    pos = data + (size + kBlock - 1) / kBlock * kBlock;
    in.seekg(static_cast<std::streamoff>(pos));
  }
  if (damage.empty() && !in && in.gcount() != 0) damage = absl::StrCat("a partial header at offset ", pos);
  size_t unlabeled = 0;
  std::string first_unlabeled;
  for (auto& [key, e] : images) {
    auto l = labels.find(key);
    if (l == labels.end()) {
      if (first_unlabeled.empty()) first_unlabeled = key;
      ++unlabeled;
      continue;
    }
    e.label = l->second;
    out->push_back(e);
  }
  if (!damage.empty()) {
    spdlog::warn("{}: read up to byte {}: {}; {} image(s) before it kept{}", path, pos, damage, out->size(),
                 unlabeled ? absl::StrCat(", ", unlabeled, " whose label was lost dropped") : "");
  } else if (unlabeled) {
    return absl::DataLossError(absl::StrCat(path, ": ", first_unlabeled, " has no .cls label (", unlabeled,
                                            " image(s) without one); repack the shards"));
  }
  return absl::OkStatus();
}

class TarShards : public Dataset {
 public:
  TarShards(std::vector<std::string> shards, std::vector<Entry> entries, std::vector<std::string> classes)
      : shards_(std::move(shards)), entries_(std::move(entries)), classes_(std::move(classes)) {
    for (const std::string& s : shards_) fds_.push_back(::open(s.c_str(), O_RDONLY | O_CLOEXEC));
  }
  ~TarShards() override {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  size_t size() const override { return entries_.size(); }
  int label(size_t i) const override { return entries_[i].label; }
  const std::vector<std::string>& classes() const override { return classes_; }
  std::string Describe(size_t i) const override { return shards_[entries_[i].shard] + ":" + entries_[i].key; }
  absl::StatusOr<std::string> ReadBytes(size_t i) const override {
    const Entry& e = entries_[i];
    std::string buf(e.size, '\0');
    ssize_t n = ::pread(fds_[e.shard], buf.data(), e.size, static_cast<off_t>(e.offset));
    if (n != static_cast<ssize_t>(e.size)) return absl::DataLossError(absl::StrCat("short read of ", Describe(i)));
    return buf;
  }

 private:
  std::vector<std::string> shards_;
  std::vector<Entry> entries_;
  std::vector<std::string> classes_;
  std::vector<int> fds_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenTarShards(const std::string& dir) {
  std::vector<std::string> shards;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".tar") shards.push_back(e.path().filename().string());
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) return absl::NotFoundError(absl::StrCat(dir, " has no .tar shards"));
  std::map<std::string, int> shard_index;
  for (size_t i = 0; i < shards.size(); ++i) shard_index[shards[i]] = static_cast<int>(i);
  std::vector<Entry> entries;
  std::ifstream index(dir + "/index.tsv");
  if (index) {
    std::vector<uint64_t> shard_sizes;
    for (const std::string& s : shards) shard_sizes.push_back(FileSize(dir + "/" + s));
    size_t line_no = 0;
    for (std::string line; std::getline(index, line);) {
      ++line_no;
      std::vector<std::string> f = absl::StrSplit(line, '\t');
      Entry e;
      if (f.size() != 5 || !shard_index.count(f[0]) || !absl::SimpleAtoi(f[2], &e.offset) ||
          !absl::SimpleAtoi(f[3], &e.size) || !absl::SimpleAtoi(f[4], &e.label) || e.label < 0) {
        return absl::DataLossError(absl::StrCat(dir, "/index.tsv line ", line_no, ": bad line '", line.substr(0, 200),
                                                "'; delete index.tsv to rescan the shards"));
      }
      e.shard = shard_index[f[0]];
      const uint64_t shard_size = shard_sizes[static_cast<size_t>(e.shard)];
      if (e.size > kMaxMemberBytes || e.offset > shard_size || e.size > shard_size - e.offset) {
        return absl::DataLossError(absl::StrCat(dir, "/index.tsv line ", line_no, ": ", f[1], " claims ", e.size,
                                                " bytes at offset ", e.offset, " of ", f[0], ", which has ", shard_size,
                                                "; delete index.tsv to rescan the shards"));
      }
      e.key = f[1];
      entries.push_back(std::move(e));
    }
  } else {
    for (size_t i = 0; i < shards.size(); ++i) {
      DT_RETURN_IF_ERROR(ScanTar(dir + "/" + shards[i], static_cast<int>(i), &entries));
    }
  }
  std::vector<std::string> classes;
  std::ifstream cls(dir + "/classes.txt");
  for (std::string line; std::getline(cls, line);) classes.push_back(line);
  int max_label = 0;
  for (const Entry& e : entries) max_label = std::max(max_label, e.label);
  for (int c = static_cast<int>(classes.size()); c <= max_label; ++c) classes.push_back(absl::StrCat(c));
  for (std::string& s : shards) s = dir + "/" + s;
  return std::unique_ptr<Dataset>(new TarShards(std::move(shards), std::move(entries), std::move(classes)));
}

absl::StatusOr<size_t> PackShards(const Dataset& src, const std::string& out_dir, const PackOptions& o) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  std::ofstream index(out_dir + "/index.tsv"), classes(out_dir + "/classes.txt");
  for (const std::string& c : src.classes()) classes << c << "\n";
  Decoder decoder;
  std::ofstream tar;
  std::string shard_name;
  uint64_t pos = 0;
  size_t written = 0;
  auto put = [&](const std::string& name, const std::string& data) {
    std::string header = TarHeader(name, data.size());
    tar.write(header.data(), kBlock);
    tar.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::string pad((kBlock - data.size() % kBlock) % kBlock, '\0');
    tar.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    uint64_t data_offset = pos + kBlock;
    pos = data_offset + data.size() + pad.size();
    return data_offset;
  };
  // Every shard is closed and checked: a write error in any of them (a full disk) is reported
  // with its name, not only one in the last.
  auto finish_shard = [&]() -> absl::Status {
    if (!tar.is_open()) return absl::OkStatus();
    tar.write(std::string(2 * kBlock, '\0').data(), 2 * kBlock);
    tar.close();
    if (!tar) {
      return absl::DataLossError(absl::StrCat("writing ", out_dir, "/", shard_name, " failed (", std::strerror(errno),
                                              "); free space and pack again"));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < src.size(); ++i) {
    if (i % o.samples_per_shard == 0) {
      DT_RETURN_IF_ERROR(finish_shard());
      shard_name = absl::StrFormat("shard-%06d.tar", i / o.samples_per_shard);
      tar.clear();
      tar.open(out_dir + "/" + shard_name, std::ios::binary | std::ios::trunc);
      pos = 0;
    }
    DT_ASSIGN_OR_RETURN(std::string bytes, src.ReadBytes(i));
    if (o.resize_shorter_side > 0) {
      absl::StatusOr<ImageInfo> info = decoder.Info(bytes);
      if (!info.ok()) continue;  // corrupt source images are left out (dtdata verify lists them)
      const double shorter = std::min(info->width, info->height);
      const int target = o.resize_shorter_side;
      absl::StatusOr<Image> img = decoder.Decode(
          bytes, Box{0, 0, static_cast<double>(info->width), static_cast<double>(info->height)},
          static_cast<int>(std::ceil(target * info->width / shorter)),
          static_cast<int>(std::ceil(target * info->height / shorter)));
      if (!img.ok()) continue;
      DT_ASSIGN_OR_RETURN(bytes, EncodeJpeg(ResizeShorterSide(*img, o.resize_shorter_side), 90));
    }
    std::string key = absl::StrFormat("%09d", i);
    uint64_t offset = put(key + ".jpg", bytes);
    put(key + ".cls", absl::StrCat(src.label(i)));
    index << shard_name << '\t' << key << '\t' << offset << '\t' << bytes.size() << '\t' << src.label(i) << '\n';
    ++written;
  }
  DT_RETURN_IF_ERROR(finish_shard());
  index.close();
  classes.close();
  if (!index || !classes) {
    return absl::DataLossError(absl::StrCat("writing ", out_dir, "/index.tsv or classes.txt failed (",
                                            std::strerror(errno), "); free space and pack again"));
  }
  return written;
}

}  // namespace dtrun::data

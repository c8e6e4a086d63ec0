#include "worker/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "worker/train_state.h"
#include "worker/zip_check.h"

namespace dtrun::worker {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Checkpoints(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    // Only real files take a retention slot (a directory or link named like one does not).
    if (name.rfind("checkpoint-", 0) == 0 && e.path().extension() == ".pt" && e.is_regular_file(ec) &&
        !e.is_symlink(ec)) {
      out.push_back(e.path());
    }
  }
  // Names carry zero-padded epoch and step, so string order is age order.
  std::sort(out.begin(), out.end());
  return out;
}

// "No space left on device (the checkpoint needs 123 MB, 4 MB are free)" for the errors a full or
// read-only disk gives; strerror otherwise.
std::string WriteError(int err, const std::string& dir, size_t bytes) {
  std::string why = std::strerror(err);
  struct statvfs vfs;
  if ((err == ENOSPC || err == EDQUOT) && ::statvfs(dir.c_str(), &vfs) == 0) {
    why += absl::StrFormat(" (the checkpoint needs %.0f MB, %.0f MB are free)", bytes / 1e6,
                           static_cast<double>(vfs.f_bavail) * vfs.f_frsize / 1e6);
  }
  return why;
}

// Writes `bytes` to `path` and makes them durable: every write, the fsync and the close checked.
absl::Status WriteDurably(const std::string& path, const std::string& bytes, const std::string& dir) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid() || !WriteAll(fd.get(), bytes.data(), bytes.size()) || ::fsync(fd.get()) != 0 ||
      ::close(fd.Release()) != 0) {
    const int err = errno;
    ::unlink(path.c_str());  // never leave a partial file filling the disk
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write checkpoint ", path, ": ", WriteError(err, dir, bytes.size()),
                     "; free space or choose another --output-dir"));
  }
  return absl::OkStatus();
}

absl::Status SyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0) {
    return absl::InternalError(absl::StrCat("cannot sync directory ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareCheckpointDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", ec.message(), "; choose a writable --output-dir"));
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0 && e.path().extension() == ".tmp") fs::remove(e.path(), ec);
  }
  const std::string probe = dir + "/.write-probe";
  absl::Status st = WriteDurably(probe, "dtrun\n", dir);
  ::unlink(probe.c_str());
  if (!st.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(dir, " is not writable: ", st.message()));
  }
  return absl::OkStatus();
}

absl::Status SaveCheckpoint(const std::string& dir, int keep, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, const Progress& p, const GradScaler* scaler) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive, optim_archive;
  model.save(model_archive);
  optimizer.save(optim_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", optim_archive);
  archive.write("epoch", torch::tensor(p.epoch));
  archive.write("next_batch", torch::tensor(p.next_batch));
  archive.write("global_step", torch::tensor(p.global_step));
  archive.write("best_acc1", torch::tensor(p.best_acc1, torch::kFloat64));
  archive.write("global_batch", torch::tensor(p.global_batch));
  if (scaler) {
    torch::serialize::OutputArchive scaler_archive;
    scaler->Save(scaler_archive);
    archive.write("scaler", scaler_archive);
  }
  char name[64];
  std::snprintf(name, sizeof(name), "checkpoint-%06lld-%09lld.pt", static_cast<long long>(p.epoch),
                static_cast<long long>(p.next_batch));
  const std::string final_path = dir + "/" + name, tmp = final_path + ".tmp";
  // Serialized in memory first, so that every byte reaches the disk through checked writes (a
  // full disk is "No space left on device", not an assertion inside the zip writer).
  std::ostringstream bytes;
  archive.save_to(bytes);
  DT_RETURN_IF_ERROR(WriteDurably(tmp, bytes.str(), dir));
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(err)));
  }
  DT_RETURN_IF_ERROR(SyncDir(dir));
  std::vector<fs::path> all = Checkpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i], ec);
  return absl::OkStatus();
}

absl::Status SaveCheckpoint(const std::string& dir, int keep, const TrainState& state) {
  return SaveCheckpoint(dir, keep, *state.model, *state.optimizer, *state.progress, state.scaler);
}

namespace {

// A scalar read into a fresh tensor: reading into a defined tensor of another dtype would keep
// that dtype and reinterpret the bits (best_acc1 read back as an int64 before this).
torch::Tensor ReadScalar(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::Tensor t;
  archive.read(key, t);
  return t;
}

template <typename T>
std::string Serialized(T& saveable) {
  torch::serialize::OutputArchive archive;
  saveable.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

template <typename T>
void Restore(T& loadable, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  loadable.load(archive);
}

}  // namespace

namespace {

std::string ShapeOf(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

// LibTorch's load replaces a tensor whose shape differs (a checkpoint of another model, or of the
// same model on another dataset): found here, before training indexes out of range.
void CheckShapesUnchanged(torch::nn::Module& model, const std::vector<std::pair<std::string, std::string>>& before) {
  auto after = model.named_parameters(/*recurse=*/true);
  for (const auto& [name, shape] : before) {
    const torch::Tensor* now = after.find(name);
    if (now != nullptr && ShapeOf(*now) != shape) {
      throw std::runtime_error("made for a different model: " + name + " is " + ShapeOf(*now) + " there, " + shape +
                               " here (another dataset or --arch?); use a fresh --output-dir");
    }
  }
}

// Applies one checkpoint's bytes; throws on anything unreadable (the caller restores).
Progress Apply(const std::string& bytes, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
               GradScaler* scaler) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive, model_archive, optim_archive;
  archive.load_from(in);
  Progress p;
  p.epoch = ReadScalar(archive, "epoch").item<int64_t>();
  p.next_batch = ReadScalar(archive, "next_batch").item<int64_t>();
  p.global_step = ReadScalar(archive, "global_step").item<int64_t>();
  p.best_acc1 = ReadScalar(archive, "best_acc1").item<double>();
  if (torch::Tensor g; archive.try_read("global_batch", g)) p.global_batch = g.item<int64_t>();  // absent before
  archive.read("model", model_archive);
  archive.read("optimizer", optim_archive);
  std::vector<std::pair<std::string, std::string>> shapes;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) shapes.emplace_back(p.key(), ShapeOf(p.value()));
  model.load(model_archive);
  CheckShapesUnchanged(model, shapes);
  optimizer.load(optim_archive);
  torch::serialize::InputArchive scaler_archive;
  if (scaler && archive.try_read("scaler", scaler_archive)) scaler->Load(scaler_archive);
  return p;
}

absl::StatusOr<std::string> ReadWhole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return absl::DataLossError(absl::StrCat("cannot read ", path.string()));
  return bytes;
}

}  // namespace

std::optional<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, const std::string& path,
                                               torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                               GradScaler* scaler) {
  std::vector<fs::path> candidates;
  if (!path.empty()) {
    candidates.push_back(path);
  } else {
    candidates = Checkpoints(dir);
    std::reverse(candidates.begin(), candidates.end());
  }
  for (const fs::path& c : candidates) {
    absl::StatusOr<std::string> bytes = ReadWhole(c);
    if (!bytes.ok()) {
      std::fprintf(stderr, "warning: %s; trying an older one\n", std::string(bytes.status().message()).c_str());
      continue;
    }
    absl::StatusOr<Progress> p = LoadCheckpointBytes(*bytes, model, optimizer, scaler);
    if (!p.ok()) {
      std::fprintf(stderr, "warning: checkpoint %s is unreadable (%s); trying an older one\n", c.string().c_str(),
                   std::string(p.status().message()).substr(0, 300).c_str());
      continue;
    }
    std::fprintf(stderr, "resuming from %s (epoch %lld, batch %lld)\n", c.string().c_str(),
                 static_cast<long long>(p->epoch), static_cast<long long>(p->next_batch));
    return LoadedCheckpoint{*p, std::move(*bytes)};
  }
  return std::nullopt;
}

absl::StatusOr<Progress> LoadCheckpointBytes(const std::string& bytes, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer, GradScaler* scaler) {
  // All or nothing: a checkpoint that fails half-way (a model that loaded, an optimizer that did
  // not) must not leave the half it loaded behind.
  // LibTorch's reader can crash on corrupt input: nothing it has not seen whole gets to it.
  DT_RETURN_IF_ERROR(VerifyZipChecksums(bytes));
  const std::string model_before = Serialized(model), optimizer_before = Serialized(optimizer);
  try {
    return Apply(bytes, model, optimizer, scaler);
  } catch (const std::exception& e) {
    Restore(model, model_before);
    Restore(optimizer, optimizer_before);
    return absl::DataLossError(e.what());
  }
}

}  // namespace dtrun::worker

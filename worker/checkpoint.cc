#include "worker/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

namespace dtrun::worker {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Checkpoints(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0 && e.path().extension() == ".pt") out.push_back(e.path());
  }
  // Names carry zero-padded epoch and step, so string order is age order.
  std::sort(out.begin(), out.end());
  return out;
}

void FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

void SaveCheckpoint(const std::string& dir, int keep, torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                    const Progress& p, const GradScaler* scaler) {
  fs::create_directories(dir);
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
  if (scaler) {
    torch::serialize::OutputArchive scaler_archive;
    scaler->Save(scaler_archive);
    archive.write("scaler", scaler_archive);
  }
  char name[64];
  std::snprintf(name, sizeof(name), "checkpoint-%06lld-%09lld.pt", static_cast<long long>(p.epoch),
                static_cast<long long>(p.next_batch));
  const std::string final_path = dir + "/" + name, tmp = final_path + ".tmp";
  archive.save_to(tmp);
  FsyncPath(tmp, O_RDONLY);
  fs::rename(tmp, final_path);
  FsyncPath(dir, O_RDONLY | O_DIRECTORY);
  std::vector<fs::path> all = Checkpoints(dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove(all[i]);
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

std::optional<Progress> LoadCheckpoint(const std::string& dir, const std::string& path, torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer, GradScaler* scaler) {
  std::vector<fs::path> candidates;
  if (!path.empty()) {
    candidates.push_back(path);
  } else {
    candidates = Checkpoints(dir);
    std::reverse(candidates.begin(), candidates.end());
  }
  // All or nothing: a candidate that fails half-way (a model that loaded, an optimizer that did
  // not) must not leave the half it loaded behind.
  const std::string model_before = Serialized(model), optimizer_before = Serialized(optimizer);
  for (const fs::path& c : candidates) {
    try {
      torch::serialize::InputArchive archive, model_archive, optim_archive;
      archive.load_from(c.string());
      Progress p;
      p.epoch = ReadScalar(archive, "epoch").item<int64_t>();
      p.next_batch = ReadScalar(archive, "next_batch").item<int64_t>();
      p.global_step = ReadScalar(archive, "global_step").item<int64_t>();
      p.best_acc1 = ReadScalar(archive, "best_acc1").item<double>();
      archive.read("model", model_archive);
      archive.read("optimizer", optim_archive);
      model.load(model_archive);
      optimizer.load(optim_archive);
      torch::serialize::InputArchive scaler_archive;
      if (scaler && archive.try_read("scaler", scaler_archive)) scaler->Load(scaler_archive);
      std::fprintf(stderr, "resuming from %s (epoch %lld, batch %lld)\n", c.string().c_str(),
                   static_cast<long long>(p.epoch), static_cast<long long>(p.next_batch));
      return p;
    } catch (const std::exception& e) {
      Restore(model, model_before);
      Restore(optimizer, optimizer_before);
      std::fprintf(stderr, "warning: checkpoint %s is unreadable (%s); trying an older one\n", c.string().c_str(),
                   std::string(e.what()).substr(0, 120).c_str());
    }
  }
  return std::nullopt;
}

}  // namespace dtrun::worker

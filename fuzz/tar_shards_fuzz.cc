// libFuzzer: a shard folder is untrusted. The input becomes a tar shard and, after a "\n==\n"
// separator if there is one, its index.tsv; the folder is opened and every sample read. Nothing
// crashes, and no read is larger than the shard.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "worker/data/dataset.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tar_shards_fuzz_XXXXXX";
    return std::string(::mkdtemp(tmpl));
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find("\n==\n");
  const std::string tar = input.substr(0, cut);
  std::ofstream(Dir() + "/shard-000000.tar", std::ios::binary | std::ios::trunc) << tar;
  if (cut == std::string::npos) {
    ::unlink((Dir() + "/index.tsv").c_str());
  } else {
    std::ofstream(Dir() + "/index.tsv", std::ios::binary | std::ios::trunc) << input.substr(cut + 4);
  }
  absl::StatusOr<std::unique_ptr<dtrun::data::Dataset>> ds = dtrun::data::OpenTarShards(Dir());
  if (!ds.ok()) return 0;
  for (size_t i = 0; i < (*ds)->size(); ++i) {
    absl::StatusOr<std::string> bytes = (*ds)->ReadBytes(i);
    if (bytes.ok() && bytes->size() > tar.size()) std::abort();
    (void)(*ds)->label(i);
  }
  return 0;
}

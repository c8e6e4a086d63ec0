#include "launcher/launch_values.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launcher/device_count.h"
#include "launcher/launch_flags.h"

namespace dtrun {

absl::StatusOr<std::pair<int, int>> ParseNnodes(const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  int lo = 0, hi = 0;
  bool ok = parts.size() == 1 ? absl::SimpleAtoi(parts[0], &lo) && (hi = lo, true)
            : parts.size() == 2 ? absl::SimpleAtoi(parts[0], &lo) && absl::SimpleAtoi(parts[1], &hi)
                                : false;
  if (!ok || lo < 1) return BadFlag(absl::StrCat("--nnodes '", value, "': expected N or MIN:MAX with N >= 1"));
  if (lo > hi) return BadFlag(absl::StrCat("--nnodes '", value, "': MIN (", lo, ") is greater than MAX (", hi, ")"));
  return std::make_pair(lo, hi);
}

absl::StatusOr<NprocPerNode> ParseNprocPerNode(const std::string& value, const HostProbe& host,
                                               const std::map<std::string, std::string>& env) {
  int n = 0;
  if (absl::SimpleAtoi(value, &n)) {
    if (n >= 1) return NprocPerNode{n, ""};
    return BadFlag(absl::StrCat("--nproc-per-node '", value, "': expected a positive integer, cpu, gpu, cuda, xpu or auto"));
  }
  auto said = [&](int count, const std::string& what) {
    return NprocPerNode{count, absl::StrCat("--nproc-per-node ", value, ": ", count, " (", what, ")")};
  };
  const bool gpu = value == "gpu" || value == "cuda";
  if (value == "cpu") return said(host.CpuCount(), "this host's cores");
  if (!gpu && value != "xpu" && value != "auto") {
    return BadFlag(absl::StrCat("--nproc-per-node '", value, "': expected a positive integer, cpu, gpu, cuda, xpu or auto"));
  }
  const AcceleratorInventory inventory = host.Accelerators();
  // PyTorch's "cuda" devices are NVIDIA's, or AMD's under ROCm.
  std::vector<DeviceKind> kinds;
  if (gpu || value == "auto") {
    kinds.push_back(CudaDeviceKind(inventory));
  }
  if (value == "xpu" || value == "auto") kinds.push_back(DeviceKind::kIntel);
  std::vector<std::string> looked;
  for (DeviceKind kind : kinds) {
    DeviceCount devices = CountVisibleDevices(kind, inventory, env);
    if (devices.count > 0) return said(devices.count, devices.source);
    looked.push_back(devices.source);
  }
  if (value == "auto") return said(host.CpuCount(), absl::StrCat("no accelerator visible: ", absl::StrJoin(looked, "; "), "; so this host's cores"));
  return BadFlag(absl::StrCat("--nproc-per-node ", value, ": no device visible to the workers (", absl::StrJoin(looked, "; "),
                          "); give a number, or cpu"));
}

absl::StatusOr<std::map<int, StreamMask>> ParseStreamSpec(const std::string& flag,
                                                          const std::string& value, int nproc) {
  std::map<int, StreamMask> out;
  auto bad = [&] {
    return BadFlag(absl::StrCat(flag, " '", value, "': expected 0-3 (1=stdout, 2=stderr, 3=both) or "
                            "local_rank:mask,... such as 0:1,1:3"));
  };
  int mask = 0;
  if (absl::SimpleAtoi(value, &mask)) {
    if (mask < 0 || mask > 3) return bad();
    for (int r = 0; r < nproc; ++r) out[r] = mask;
    return out;
  }
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || !absl::SimpleAtoi(kv[1], &mask) ||
        mask < 0 || mask > 3 || rank < 0) {
      return bad();
    }
    out[rank] = mask;
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::chrono::milliseconds>> ParseSectionTimeouts(const std::string& value) {
  std::map<std::string, std::chrono::milliseconds> out;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double seconds = 0;
    bool name_ok = kv.size() == 2 && progress::IsValidSectionName(kv[0]);
    if (!name_ok || !absl::SimpleAtod(kv[1], &seconds) || !std::isfinite(seconds) || seconds <= 0 ||
        seconds > 7 * 86400) {
      return BadFlag(absl::StrCat("--section-timeout: '", item, "' is not NAME=SECONDS (a section name of "
                              "A-Z a-z 0-9 _ . : - and seconds up to 604800), e.g. step=60,checkpoint=900"));
    }
    out[kv[0]] = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& value) {
  std::map<std::string, std::string> out;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return BadFlag(absl::StrCat("--rdzv-conf: '", item, "' is not key=value"));
    }
    out[kv[0]] = kv[1];
  }
  return out;
}

}  // namespace dtrun

#include "launcher/device_count.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dtrun {
namespace {

constexpr int kInvalid = -1;
constexpr int kUnchecked = -2;  // a UUID the driver's files cannot confirm (MIG, or no UUIDs shown)

// The index of the device an entry names, kInvalid where the runtime would stop, or kUnchecked.
int EntryIndex(absl::string_view entry, const std::vector<std::string>& uuids) {
  int index = 0;
  if (absl::SimpleAtoi(entry, &index)) return index >= 0 && index < static_cast<int>(uuids.size()) ? index : kInvalid;
  if (absl::StartsWith(entry, "MIG-")) return kUnchecked;
  if (!absl::StartsWith(entry, "GPU-")) return kInvalid;
  int found = kInvalid;
  for (int i = 0; i < static_cast<int>(uuids.size()); ++i) {
    if (uuids[i].empty()) return kUnchecked;
    if (absl::StartsWith(uuids[i], entry)) {
      if (found != kInvalid) return kInvalid;  // an ambiguous prefix
      found = i;
    }
  }
  return found;
}

const std::string* Find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

std::string Plural(int n, const char* what) { return absl::StrCat(n, " ", what, n == 1 ? "" : "s"); }

std::vector<std::string> UuidsOf(const std::vector<PciGpu>& gpus) {
  std::vector<std::string> uuids;
  for (const PciGpu& gpu : gpus) uuids.push_back(gpu.uuid);
  return uuids;
}

// `gpus` narrowed by each list in turn: a later list indexes what the earlier left.
VisibleGpus Narrowed(const std::vector<PciGpu>& gpus,
                     const std::vector<std::pair<const char*, const std::string*>>& lists, const char* devices,
                     const char* where) {
  const std::vector<std::string> uuids = UuidsOf(gpus);
  VisibleGpus out;
  for (int i = 0; i < static_cast<int>(gpus.size()); ++i) out.physical.push_back(i);
  out.source = absl::StrCat(Plural(static_cast<int>(gpus.size()), devices), " in ", where);
  for (const auto& [variable, list] : lists) {
    std::vector<std::string> left_uuids;
    for (int i : out.physical) left_uuids.push_back(i >= 0 ? uuids[i] : "");
    std::vector<int> physical;
    for (int entry : VisibleIndices(*list, left_uuids)) physical.push_back(entry >= 0 ? out.physical[entry] : -1);
    out.physical = std::move(physical);
    out.source = absl::StrCat(variable, "=", *list, " of ", out.source);
  }
  return out;
}

}  // namespace

std::vector<int> VisibleIndices(const std::string& list, const std::vector<std::string>& uuids) {
  std::vector<int> out;
  std::set<std::string> seen;  // "#<index>", or the unchecked UUID itself
  for (absl::string_view raw : absl::StrSplit(list, ',')) {
    absl::string_view entry = absl::StripAsciiWhitespace(raw);
    const int index = EntryIndex(entry, uuids);
    if (index == kInvalid) break;
    const std::string key = index == kUnchecked ? std::string(entry) : absl::StrCat("#", index);
    if (!seen.insert(key).second) break;
    out.push_back(index == kUnchecked ? -1 : index);
  }
  return out;
}

int VisibleEntries(const std::string& list, const std::vector<std::string>& uuids) {
  return static_cast<int>(VisibleIndices(list, uuids).size());
}

DeviceKind CudaDeviceKind(const AcceleratorInventory& inventory) {
  return inventory.nvidia.empty() && !inventory.amd.empty() ? DeviceKind::kAmd : DeviceKind::kNvidia;
}

VisibleGpus FindVisibleGpus(DeviceKind kind, const AcceleratorInventory& inventory,
                            const std::map<std::string, std::string>& env) {
  std::vector<std::pair<const char*, const std::string*>> lists;
  auto add_first_set = [&](std::initializer_list<const char*> variables) {
    for (const char* variable : variables) {
      if (const std::string* list = Find(env, variable)) {
        lists.emplace_back(variable, list);
        return;
      }
    }
  };
  if (kind == DeviceKind::kAmd) {
    add_first_set({"ROCR_VISIBLE_DEVICES"});
    add_first_set({"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"});
    return Narrowed(inventory.amd, lists, "AMD GPU", "/sys/class/kfd");
  }
  add_first_set({"CUDA_VISIBLE_DEVICES"});
  return Narrowed(inventory.nvidia, lists, "NVIDIA GPU", "/proc/driver/nvidia/gpus");
}

DeviceCount CountVisibleDevices(DeviceKind kind, const AcceleratorInventory& inventory,
                                const std::map<std::string, std::string>& env) {
  switch (kind) {
    case DeviceKind::kNvidia:
    case DeviceKind::kAmd: {
      VisibleGpus gpus = FindVisibleGpus(kind, inventory, env);
      return DeviceCount{static_cast<int>(gpus.physical.size()), std::move(gpus.source)};
    }
    case DeviceKind::kIntel: {
      // ZE_AFFINITY_MASK lists devices ("0,1") or sub-devices ("0.0,0.1"): each entry is one.
      DeviceCount out{inventory.intel_gpus, absl::StrCat(Plural(inventory.intel_gpus, "Intel GPU"), " in /sys/class/drm")};
      if (const std::string* mask = Find(env, "ZE_AFFINITY_MASK"); mask && !mask->empty()) {
        std::vector<absl::string_view> entries = absl::StrSplit(*mask, ',', absl::SkipWhitespace());
        out.count = inventory.intel_gpus == 0 ? 0 : static_cast<int>(entries.size());
        out.source = absl::StrCat("ZE_AFFINITY_MASK=", *mask, " of ", out.source);
      }
      return out;
    }
  }
  return {};
}

}  // namespace dtrun

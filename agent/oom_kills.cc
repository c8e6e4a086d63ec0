#include "agent/oom_kills.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/untrusted_file.h"
#include "status/status_table.h"

namespace dtrun {
namespace {

constexpr size_t kMaxKernelFileBytes = 64 << 10;  // /proc/vmstat is ~5 KiB
// A v1 limit at or above this is "no limit" (the kernel's unlimited value rounded to pages).
constexpr int64_t kNoLimit = int64_t{1} << 62;

// A kernel file's text; "" when it cannot be read (each caller then finds nothing in it).
std::string ReadKernelFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUntrustedFile(path, kMaxKernelFileBytes);
  return text.ok() ? *std::move(text) : std::string();
}

int64_t CounterIn(const std::string& path) {  // "" (none found) reads as nothing too
  return FindCounter(ReadKernelFile(path), "oom_kill").value_or(-1);
}

// "" for the root, else "/a/b" without a trailing slash.
std::string CleanPath(absl::string_view path) { return std::string(absl::StripSuffix(path, "/")); }

// "/a/b" -> "/a" -> "" (the root).
std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

constexpr char kFix[] =
    "give each worker less to hold (batch size, DataLoader workers and prefetch, --nproc-per-node) or the "
    "job more memory";

}  // namespace

std::optional<int64_t> FindCounter(absl::string_view text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (fields.size() == 2 && fields[0] == key && absl::SimpleAtoi(fields[1], &value) && value >= 0) return value;
  }
  return std::nullopt;
}

ProcCgroups ParseProcCgroup(absl::string_view text) {
  ProcCgroups found;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // hierarchy-ID:controller-list:path (the path may hold colons of its own)
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || !absl::StartsWith(parts[2], "/")) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      found.v2 = std::string(parts[2]);
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      if (controller == "memory") found.v1_memory = std::string(parts[2]);
    }
  }
  return found;
}

OomKillCounter::OomKillCounter(std::string root) : vmstat_file_(root + "/proc/vmstat") {
  const ProcCgroups self = ParseProcCgroup(ReadKernelFile(root + "/proc/self/cgroup"));
  const std::string mount = root + "/sys/fs/cgroup";
  // v2 (the unified hierarchy mounted at /sys/fs/cgroup), else v1's memory controller. A machine
  // with both (hybrid) has the memory controller on one of them only.
  struct Candidate {
    std::string hierarchy, path, counter, limit;
  };
  std::vector<Candidate> candidates;
  if (!self.v2.empty()) candidates.push_back({mount, CleanPath(self.v2), "memory.events", "memory.max"});
  if (!self.v1_memory.empty()) {
    candidates.push_back({mount + "/memory", CleanPath(self.v1_memory), "memory.oom_control", "memory.limit_in_bytes"});
  }
  for (const Candidate& c : candidates) {
    if (CounterIn(c.hierarchy + c.path + "/" + c.counter) < 0) continue;
    cgroup_counter_file_ = c.hierarchy + c.path + "/" + c.counter;
    hierarchy_ = c.hierarchy;
    cgroup_path_ = c.path;
    limit_file_name_ = c.limit;
    return;
  }
}

OomCounts OomKillCounter::Read() const { return {CounterIn(cgroup_counter_file_), CounterIn(vmstat_file_)}; }

std::string OomKillCounter::LimitText() const {
  // The limit that binds is the smallest on the way up: a Slurm task's cgroup has none of its own,
  // its job's has one.
  int64_t smallest = kNoLimit;
  std::string where;
  for (std::string path = cgroup_path_;; path = ParentOf(path)) {
    const std::string text = ReadKernelFile(hierarchy_ + path + "/" + limit_file_name_);
    int64_t limit = 0;  // "max" or unreadable: none here
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &limit) && limit > 0 && limit < smallest) {
      smallest = limit;
      where = path.empty() ? "/" : path;
    }
    if (path.empty()) break;
  }
  if (where.empty()) return "";
  return absl::StrCat("; its memory limit is ", status::HumanBytes(smallest),
                      where == cgroup_path_ ? "" : absl::StrCat(", set on ", where));
}

std::optional<std::string> OomKillCounter::ExplainKill(const OomCounts& before, const OomCounts& now) const {
  if (before.cgroup >= 0 && now.cgroup >= 0) {
    if (now.cgroup <= before.cgroup) return std::nullopt;  // a kill elsewhere on the machine is not this one
    return absl::StrCat("killed by the kernel's out-of-memory killer (oom_kill ", before.cgroup, " -> ", now.cgroup,
                        " in ", cgroup_counter_file_, LimitText(), "): ", kFix);
  }
  if (before.machine < 0 || now.machine <= before.machine) return std::nullopt;
  return absl::StrCat("killed by the kernel's out-of-memory killer, it seems (oom_kill ", before.machine, " -> ",
                      now.machine, " in ", vmstat_file_, ", machine-wide, as it died): ", kFix);
}

std::optional<std::string> OomKillCounter::NoteKillsBeside(const OomCounts& before, const OomCounts& now) const {
  if (before.cgroup < 0 || now.cgroup <= before.cgroup) return std::nullopt;
  const int64_t kills = now.cgroup - before.cgroup;
  return absl::StrCat("[dtrun] the kernel's out-of-memory killer killed ", kills,
                      kills == 1 ? " process" : " processes", " of this job during this attempt (oom_kill ",
                      before.cgroup, " -> ", now.cgroup, " in ", cgroup_counter_file_, LimitText(),
                      "), such as a DataLoader worker \"killed by signal: Killed\": ", kFix);
}

}  // namespace dtrun

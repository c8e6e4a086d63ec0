#include "launcher/summary_dedup.h"

#include <utility>

#include "absl/strings/match.h"

namespace dtrun {
namespace {

// agent/failure_report.cc's rule, as a line.
bool IsRule(const std::string& line) { return line == std::string(60, '=') + "\n"; }

}  // namespace

std::vector<std::string> SummaryDedup::Feed(int stream, std::string line) {
  Held& h = held_[stream];
  std::vector<std::string> out;
  if (!h.block.empty()) {
    h.block += line;
    if (IsRule(line)) {
      std::string block = std::exchange(h.block, "");
      after_summary_.insert(stream);
      if (shown_.count(block) > 0) {
        ++dropped_;
        return out;
      }
      if (shown_.size() < kMaxKept) shown_.insert(block);  // a job has one summary; a flood is not kept
      out.push_back(std::move(block));
    } else if (h.block.size() > kMaxBlock) {
      out.push_back(std::exchange(h.block, ""));
    }
    return out;
  }
  if (h.rule) {
    std::string rule = *std::exchange(h.rule, std::nullopt);
    if (absl::EndsWith(line, " FAILED\n")) {
      h.block = rule + line;
      return out;
    }
    out.push_back(std::move(rule));
  }
  if (IsRule(line)) {
    h.rule = std::move(line);
  } else if (after_summary_.count(stream) == 0 || trailer_shown_.count(line) == 0) {
    if (after_summary_.count(stream) > 0 && trailer_shown_.size() < kMaxTrailer) trailer_shown_.insert(line);
    out.push_back(std::move(line));
  }
  return out;
}

std::vector<std::string> SummaryDedup::Flush(int stream) {
  std::vector<std::string> out;
  auto it = held_.find(stream);
  if (it == held_.end()) return out;
  if (it->second.rule) out.push_back(*it->second.rule);
  if (!it->second.block.empty()) out.push_back(it->second.block);
  held_.erase(it);
  return out;
}

}  // namespace dtrun

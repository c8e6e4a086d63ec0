#include "worker/replica_vote.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace dtrun::worker {

ReplicaVote VoteOnFingerprints(const std::vector<uint64_t>& by_rank) {
  ReplicaVote vote;
  std::map<uint64_t, int> counts;
  for (uint64_t f : by_rank) ++counts[f];
  if (counts.size() <= 1) return vote;
  vote.agreed = false;
  for (const auto& [f, n] : counts) {
    if (2 * n > static_cast<int>(by_rank.size())) vote.majority = f;
  }
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (!vote.majority || by_rank[r] != *vote.majority) vote.differing.push_back(static_cast<int>(r));
  }
  return vote;
}

std::string FingerprintHex(uint64_t fingerprint) { return absl::StrFormat("%016x", fingerprint); }

std::string DescribeDivergence(const ReplicaVote& vote, const std::vector<uint64_t>& by_rank, int64_t step) {
  if (vote.agreed) return "";
  std::vector<std::string> who;
  for (int r : vote.differing) {
    if (who.size() == 8) {
      who.push_back(absl::StrCat("and ", vote.differing.size() - 8, " more"));
      break;
    }
    who.push_back(absl::StrCat("rank ", r, " (", FingerprintHex(by_rank[static_cast<size_t>(r)]), ")"));
  }
  std::string line = absl::StrCat("the replicas diverged at step ", step, ": ", absl::StrJoin(who, ", "));
  if (vote.majority) {
    absl::StrAppend(&line, vote.differing.size() == 1 ? " holds" : " hold", " other parameters or optimizer state than the ",
                    by_rank.size() - vote.differing.size(), " other rank(s) (", FingerprintHex(*vote.majority), ")");
  } else {
    absl::StrAppend(&line, " disagree with no majority: which one is wrong cannot be told");
  }
  return line;
}

}  // namespace dtrun::worker

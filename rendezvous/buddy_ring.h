// Which member of a round keeps the buddy copies of which (docs/DESIGN.md, "Buddy copies"), kept
// apart from the state machine because it is a pure function of the members' failure domains.
//
// Without failure domains (fewer than two among the members) a member's buddy is the next group
// rank, the last one's the first. With them, the members are laid on a ring ordered by (domain,
// group rank), and each one's buddy is the member `shift` places further round, where `shift` is
// the size of the largest domain. Each domain is an arc of the ring no longer than the shift, so
// while the largest domain holds at most half the members no member's buddy shares its domain; past
// that, as few do as can (2m - n of the largest domain's m members, which have only n - m others
// to go to). The map is a rotation of the ring: every member keeps the copies of exactly one other,
// so a buddy's memory and network carry one node's copies, as without domains.
#pragma once

#include <string>
#include <vector>

namespace dtrun::rdzv {

// By group rank, the group rank of each member's buddy, given each member's failure domain ("" is
// a domain like any other: the members that said none). Fewer than two members: no buddies (empty).
std::vector<int> BuddyRanks(const std::vector<const std::string*>& domains);

// How many members' buddies share their domain, for the service's line about a round.
int BuddiesInTheirOwnDomain(const std::vector<const std::string*>& domains, const std::vector<int>& buddies);

}  // namespace dtrun::rdzv

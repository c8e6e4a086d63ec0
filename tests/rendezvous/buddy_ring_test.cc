// Which member keeps whose buddy copies: the next group rank without failure domains, one in
// another domain with them, and always a rotation (each member keeps exactly one other's copies).
#include "rendezvous/buddy_ring.h"

#include <algorithm>
#include <map>
#include <random>

#include "gtest/gtest.h"

namespace dtrun::rdzv {
namespace {

std::vector<int> Buddies(const std::vector<std::string>& domains) {
  std::vector<const std::string*> ptrs;
  for (const std::string& d : domains) ptrs.push_back(&d);
  return BuddyRanks(ptrs);
}

int SameDomain(const std::vector<std::string>& domains, const std::vector<int>& buddies) {
  std::vector<const std::string*> ptrs;
  for (const std::string& d : domains) ptrs.push_back(&d);
  return BuddiesInTheirOwnDomain(ptrs, buddies);
}

// Every member has a buddy other than itself, and keeps the copies of exactly one member.
void ExpectARotation(const std::vector<int>& buddies) {
  std::vector<int> kept_for(buddies.size(), 0);
  for (size_t i = 0; i < buddies.size(); ++i) {
    ASSERT_GE(buddies[i], 0);
    ASSERT_LT(static_cast<size_t>(buddies[i]), buddies.size());
    EXPECT_NE(static_cast<size_t>(buddies[i]), i);
    ++kept_for[buddies[i]];
  }
  EXPECT_TRUE(std::all_of(kept_for.begin(), kept_for.end(), [](int n) { return n == 1; }));
}

TEST(BuddyRingTest, WithoutDomainsABuddyIsTheNextGroupRank) {
  EXPECT_EQ(Buddies({"", "", "", ""}), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(Buddies({"rack-a", "rack-a", "rack-a"}), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(Buddies({"rack-a"}), std::vector<int>{});
  EXPECT_EQ(Buddies({}), std::vector<int>{});
}

// Slurm places a job's nodes switch by switch: group ranks 0-3 under one leaf, 4-7 under another.
// The next group rank would keep 3 of every 4 copies in the same rack.
TEST(BuddyRingTest, RacksOfConsecutiveRanksCopyToTheOtherRack) {
  const std::vector<std::string> racks = {"a", "a", "a", "a", "b", "b", "b", "b"};
  const std::vector<int> buddies = Buddies(racks);
  ExpectARotation(buddies);
  EXPECT_EQ(SameDomain(racks, buddies), 0);
  EXPECT_EQ(buddies, (std::vector<int>{4, 5, 6, 7, 0, 1, 2, 3}));
}

// A domain with more than half the members cannot send them all elsewhere: the others can take
// only n - m of its m members, and the rest stay at home.
TEST(BuddyRingTest, ADomainOfMoreThanHalfTheMembersKeepsAsFewAtHomeAsCanBe) {
  const std::vector<std::string> domains = {"big", "big", "small", "big", "big"};
  const std::vector<int> buddies = Buddies(domains);
  ExpectARotation(buddies);
  EXPECT_EQ(SameDomain(domains, buddies), 2 * 4 - 5);
  EXPECT_NE(domains[buddies[2]], "small");
}

// Any mix of domains, sizes and orders: a rotation, with as few buddies at home as the largest
// domain forces (none while it holds at most half the members).
TEST(BuddyRingTest, AnyMixOfDomainsGivesARotationWithTheFewestBuddiesAtHome) {
  std::mt19937 random(20261207);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 2 + static_cast<int>(random() % 40);
    const int kinds = 1 + static_cast<int>(random() % 6);
    std::vector<std::string> domains;
    std::map<std::string, int> sizes;
    for (int i = 0; i < n; ++i) {
      domains.push_back(random() % 7 == 0 ? "" : "d" + std::to_string(random() % kinds));
      ++sizes[domains.back()];
    }
    int largest = 0;
    for (const auto& [domain, size] : sizes) largest = std::max(largest, size);
    const std::vector<int> buddies = Buddies(domains);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << n << " members, largest domain " << largest);
    ExpectARotation(buddies);
    // One domain for all: the next group rank, every buddy at home.
    EXPECT_EQ(SameDomain(domains, buddies), largest == n ? n : std::max(0, 2 * largest - n));
  }
}

}  // namespace
}  // namespace dtrun::rdzv

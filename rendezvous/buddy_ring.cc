#include "rendezvous/buddy_ring.h"

#include <algorithm>
#include <numeric>

namespace dtrun::rdzv {

std::vector<int> BuddyRanks(const std::vector<const std::string*>& domains) {
  const int n = static_cast<int>(domains.size());
  if (n < 2) return {};
  std::vector<int> ring(static_cast<size_t>(n));
  std::iota(ring.begin(), ring.end(), 0);
  // Ties keep group rank order (std::sort with the rank as the second key: no temporary buffer).
  std::sort(ring.begin(), ring.end(), [&](int a, int b) {
    const int by_domain = domains[a]->compare(*domains[b]);
    return by_domain != 0 ? by_domain < 0 : a < b;
  });
  int largest = 0;
  for (int start = 0; start < n;) {
    int end = start + 1;
    while (end < n && *domains[ring[end]] == *domains[ring[start]]) ++end;
    largest = std::max(largest, end - start);
    start = end;
  }
  std::vector<int> buddies(static_cast<size_t>(n));
  if (largest == n) {  // one domain, or none said: the next group rank
    for (int i = 0; i < n; ++i) buddies[i] = (i + 1) % n;
    return buddies;
  }
  for (int at = 0; at < n; ++at) buddies[ring[at]] = ring[(at + largest) % n];
  return buddies;
}

int BuddiesInTheirOwnDomain(const std::vector<const std::string*>& domains, const std::vector<int>& buddies) {
  int same = 0;
  for (size_t i = 0; i < buddies.size(); ++i) same += *domains[i] == *domains[buddies[i]];
  return same;
}

}  // namespace dtrun::rdzv

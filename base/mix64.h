// splitmix64's finaliser: every input bit reaches every output bit. For hashes that pick or
// compare (a sample's share, a state's check value), not for security.
#pragma once

#include <cstdint>

namespace dtrun {

inline uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace dtrun

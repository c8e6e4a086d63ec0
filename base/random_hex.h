// Random lowercase hex digits for names that must not collide (run ids, launch ids, directories).
#pragma once

#include <random>
#include <string>

namespace dtrun {

inline std::string RandomHex(int digits) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[rd() % 16];
  return out;
}

}  // namespace dtrun

// An address as an ostream prints a pointer: "0x" and lowercase hex digits, no leading zeros.
// Writes into the caller's buffer and allocates nothing, so a signal handler may use it (the crash
// report); LibTorch 1.x keys an optimizer's state by this text (worker/torch_compat.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrun {

inline constexpr size_t kHexAddressChars = 2 + 2 * sizeof(uintptr_t);

// Returns the number of characters written to `out` (at most kHexAddressChars).
inline size_t FormatHexAddress(uintptr_t address, char (&out)[kHexAddressChars]) {
  char reversed[2 * sizeof(uintptr_t)];
  size_t k = 0;
  do {
    reversed[k++] = "0123456789abcdef"[address & 0xf];
    address >>= 4;
  } while (address != 0);
  size_t n = 0;
  out[n++] = '0';
  out[n++] = 'x';
  while (k > 0) out[n++] = reversed[--k];
  return n;
}

}  // namespace dtrun

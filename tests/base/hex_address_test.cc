#include "base/hex_address.h"

#include <cstdint>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

std::string Formatted(uintptr_t address) {
  char text[kHexAddressChars];
  return std::string(text, FormatHexAddress(address, text));
}

// As an ostream prints a pointer (LibTorch 1.x's optimizer-state keys are that text), from the
// smallest address to the largest, which fills the buffer exactly.
TEST(HexAddressTest, IsWhatAnOstreamPrintsForAPointer) {
  for (uintptr_t a : {uintptr_t{1}, uintptr_t{0xf}, uintptr_t{0x10}, uintptr_t{0xdeadbeef}, uintptr_t{0x7f3a5c001230},
                      ~uintptr_t{0}}) {
    std::ostringstream printed;
    printed << reinterpret_cast<const void*>(a);
    EXPECT_EQ(Formatted(a), printed.str());
  }
  EXPECT_EQ(Formatted(~uintptr_t{0}).size(), kHexAddressChars);
  EXPECT_EQ(Formatted(0), "0x0");
}

}  // namespace
}  // namespace dtrun

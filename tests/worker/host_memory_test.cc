#include "worker/host_memory.h"

#include <malloc.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Bytes of a fresh 64 MiB block that malloc serves with mmap.
size_t MappedBytesOfNewBigBlock(void** block) {
  const size_t before = mallinfo2().hblkhd;
  *block = std::malloc(64 << 20);
  static_cast<volatile char*>(*block)[0] = 1;  // used, so the compiler keeps the malloc
  return mallinfo2().hblkhd - before;
}

TEST(HostMemoryTest, BigBlocksComeFromTheHeapAndStayThereAfterFree) {
  void* block = nullptr;
  // Control: by default glibc maps a block this size and unmaps it on free.
  EXPECT_GE(MappedBytesOfNewBigBlock(&block), size_t{64} << 20);
  std::free(block);

  ASSERT_TRUE(RetainFreedHostMemory());
  EXPECT_EQ(MappedBytesOfNewBigBlock(&block), 0u);
  std::free(block);
  // The freed block stays in the heap for the next step instead of going back to the kernel.
  EXPECT_GE(mallinfo2().fordblks, size_t{64} << 20);
}

}  // namespace
}  // namespace dtrun::worker

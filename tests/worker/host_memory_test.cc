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

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;
#elif defined(__has_feature)
constexpr bool kGlibcMalloc = !__has_feature(address_sanitizer) && !__has_feature(thread_sanitizer);
#else
constexpr bool kGlibcMalloc = true;
#endif

TEST(HostMemoryTest, BigBlocksComeFromTheHeapAndStayThereAfterFree) {
  if (!kGlibcMalloc) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc, whose tuning this tests";
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

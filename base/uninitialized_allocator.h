// An allocator whose containers leave new elements of trivial types uninitialised: a
// std::vector<uint8_t, UninitializedAllocator<uint8_t>> grown by resize() is not zeroed first. For
// buffers every byte of which is written before it is read (a batch's pixels: 38.5 MB a batch of
// 256 at 224 px, whose zeroing was ~2% of a loader thread).
#pragma once

#include <memory>
#include <new>
#include <type_traits>

namespace dtrun {

template <typename T>
class UninitializedAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}

  // Without arguments: default-initialised (for trivial types, nothing is written). With
  // arguments (copies, push_back) std::allocator_traits constructs as usual: this overload hides
  // std::allocator's, so it falls back to placement new.
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
};

}  // namespace dtrun

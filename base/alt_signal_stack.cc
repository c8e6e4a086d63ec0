#include "base/alt_signal_stack.h"

#include <signal.h>

#include <memory>

namespace dtrun {
namespace {

constexpr size_t kAltStackBytes = 64 << 10;

// Owns the thread's alternate stack; switched off before it is freed, at the thread's end, so the
// kernel never delivers a signal onto freed memory.
struct ThreadAltStack {
  std::unique_ptr<char[]> memory;
  ~ThreadAltStack() {
    if (!memory) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
  }
};

thread_local ThreadAltStack thread_alt_stack;

}  // namespace

void UseAlternateSignalStackOnThisThread() {
  stack_t current{};
  if (::sigaltstack(nullptr, &current) == 0 && !(current.ss_flags & SS_DISABLE)) return;
  thread_alt_stack.memory = std::make_unique<char[]>(kAltStackBytes);
  stack_t ss{};
  ss.ss_sp = thread_alt_stack.memory.get();
  ss.ss_size = kAltStackBytes;
  if (::sigaltstack(&ss, nullptr) != 0) thread_alt_stack.memory.reset();
}

}  // namespace dtrun

#include "worker/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/debugging/symbolize.h"
#include "base/alt_signal_stack.h"
#include "base/hex_address.h"

namespace dtrun::worker {
namespace {

// A sanitizer handles these signals itself, and says more.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxFrames = 64;
std::atomic<bool> installed{false};
std::atomic<bool> reporting{false};

// Text built without allocating (a signal handler may run inside malloc).
class Line {
 public:
  void Add(const char* s) {
    while (*s != '\0' && n_ < sizeof(buf_)) buf_[n_++] = *s++;
  }
  void AddHex(uintptr_t v) {
    char text[kHexAddressChars];
    const size_t len = FormatHexAddress(v, text);
    for (size_t i = 0; i < len && n_ < sizeof(buf_); ++i) buf_[n_++] = text[i];
  }
  void AddInt(int v) {
    char digits[12];
    int k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n_ < sizeof(buf_)) buf_[n_++] = digits[--k];
  }
  void Write() {
    size_t off = 0;
    while (off < n_) {
      const ssize_t w = ::write(STDERR_FILENO, buf_ + off, n_ - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    n_ = 0;
  }

 private:
  char buf_[1024];
  size_t n_ = 0;
};

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
  }
  return "a fatal signal";
}

// The function at `pc`, or "?" (a stripped library, JIT code).
const char* Symbol(const void* pc, char* out, int size) { return absl::Symbolize(pc, out, size) ? out : "?"; }

// Where the signal interrupted the thread, or null where this code does not know the machine.
const void* InterruptedPc(const void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
  if (uc == nullptr) return nullptr;
#if defined(__x86_64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return reinterpret_cast<const void*>(uc->uc_mcontext.pc);
#else
  return nullptr;
#endif
}

// The first frame of the interrupted code: below it are this handler and the kernel's signal
// trampoline.
int FirstInterruptedFrame(void* const* frames, int n, const void* pc) {
  for (int i = 0; i < n; ++i) {
    if (frames[i] == pc) return i;
  }
  return n > 2 ? 2 : n;
}

void Report(int sig, const siginfo_t* info, const void* context) {
  void* frames[kMaxFrames];
  const int n = ::backtrace(frames, kMaxFrames);
  const int first = FirstInterruptedFrame(frames, n, InterruptedPc(context));
  char name[512];
  Line line;
  line.Add("Fatal signal: ");
  line.Add(SignalName(sig));
  const bool from_kernel = info != nullptr && info->si_code > 0 && sig != SIGABRT;
  if (from_kernel) {
    line.Add(" at address ");
    line.AddHex(reinterpret_cast<uintptr_t>(info->si_addr));
  }
  if (first < n && sig != SIGABRT) {  // abort()'s own frames say nothing: the stack shows who called it
    line.Add(" in ");
    line.Add(Symbol(frames[first], name, sizeof(name)));
  }
  line.Add("\nStack (most recent call first):\n");
  line.Write();
  for (int i = first; i < n; ++i) {
    // Beyond the interrupted frame each address is a return address: the call is the byte before.
    const char* pc = static_cast<const char*>(frames[i]) - (i == first ? 0 : 1);
    line.Add("  #");
    line.AddInt(i - first);
    line.Add(" ");
    line.AddHex(reinterpret_cast<uintptr_t>(frames[i]));
    line.Add(" ");
    line.Add(Symbol(pc, name, sizeof(name)));
    line.Add("\n");
    line.Write();
  }
}

void OnFatalSignal(int sig, siginfo_t* info, void* context) {
  if (!reporting.exchange(true)) {
    Report(sig, info, context);
  } else {
    ::sleep(5);  // another thread is reporting, and ends the process when it is done
  }
  // Die of the signal itself: the default action runs once this handler returns (the signal is
  // blocked until then), whether the fault would recur or the signal was sent.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void InstallCrashReport() {
  if (kSanitized || installed.exchange(true)) return;
  // backtrace() loads libgcc's unwinder on its first call: done here, not inside a handler.
  void* warm[1];
  ::backtrace(warm, 1);
  absl::InitializeSymbolizer("/proc/self/exe");
  UseAlternateSignalStackOnThisThread();
  struct sigaction sa {};
  sa.sa_sigaction = OnFatalSignal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : kSignals) ::sigaction(sig, &sa, nullptr);
}

}  // namespace dtrun::worker

// A C++ worker's fatal signal said on stderr before the process dies of it, as Python's
// faulthandler does for scripts: which signal, where (the faulting address, the function), and
// the stack, symbolized. dtrun's agent reads that report into the failure summary and the restart
// line (agent/stderr_error.h), where torchrun shows "Signal 11 (SIGSEGV) received by PID ...".
//
//   Fatal signal: SIGSEGV at address 0x10 in app::Crash()
//   Stack (most recent call first):
//     #0 0x55e53d8fd250 app::Crash()
//     #1 0x55e53d8fd26d app::Middle()
//     #2 0x55e53d8fd34d app::Outer()
//     #3 0x7f97ca04524a ?                   (a library's local symbol: stripped)
//
// Functions are named without their parameters (Abseil's demangler leaves them out).
//
// The process still dies of the signal: its exit status and core dump are what they would have
// been. Stacks are unwound by glibc's backtrace() (through the signal frame, without frame
// pointers) and named by Abseil's symbolizer, which is safe to call in a signal handler and reads
// an executable's own symbols, not only exported ones.
#pragma once

namespace dtrun::worker {

// For SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. The calling thread gets an alternate stack, so
// its stack overflowing is reported too (call it on the main thread); a thread the program starts
// gets one with UseAlternateSignalStackOnThisThread (base/alt_signal_stack.h), as the loader's
// and the snapshot copier's do. Idempotent. Does nothing in sanitizer builds, whose own reports
// say more.
void InstallCrashReport();

}  // namespace dtrun::worker

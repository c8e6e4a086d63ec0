// An alternate signal stack for the calling thread (sigaltstack), so that a handler installed with
// SA_ONSTACK still runs when the thread's own stack has overflowed: without one, the kernel cannot
// push the signal frame and kills the process without a word. Each thread has its own setting, and
// only the thread that installs the handlers gets one there (worker/crash_report.h), so a thread
// a program starts calls this where a crash would have something to say (a loader thread decoding
// untrusted JPEGs).
#pragma once

namespace dtrun {

// 64 KiB, freed when the thread ends. Does nothing when the thread has one already. Async-signal
// safety is not needed: call it at the start of the thread's function.
void UseAlternateSignalStackOnThisThread();

}  // namespace dtrun

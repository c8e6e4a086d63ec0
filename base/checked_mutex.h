// A std::mutex that clang's -Wthread-safety can check (as leveldb's port::Mutex), with its scoped
// lock, absl::Mutex's Await (a condition re-checked whenever the mutex is released) and a plain
// condition variable. For state the TSan build must see: Debian's Abseil is not built with TSan,
// so TSan cannot follow absl::Mutex and reports races that are not there (see
// scripts/sanitizers.sh); libstdc++'s std::mutex goes through pthread, which TSan intercepts. Only
// the gRPC adapters (rendezvous/, replica/), which TSan does not run, keep absl::Mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace dtrun {

class ABSL_LOCKABLE CheckedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (waiters_ > 0) released_.notify_all();  // their conditions may hold now
    mu_.unlock();
  }

  // As absl::Mutex::Await: returns, holding the mutex, once `ready()` holds. It is checked now and
  // each time another thread releases the mutex, so whoever changes the state need not signal.
  template <typename Predicate>
  void Await(Predicate ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    if (waiters_ > 0) released_.notify_all();  // waiting releases the mutex too
    ++waiters_;
    released_.wait(lock, ready);
    --waiters_;
    lock.release();  // still held: the caller's lock releases it
  }
  // The same with a bound: whether `ready()` holds on return.
  template <typename Predicate, typename Rep, typename Period>
  bool AwaitWithTimeout(Predicate ready, std::chrono::duration<Rep, Period> timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    if (waiters_ > 0) released_.notify_all();  // waiting releases the mutex too
    ++waiters_;
    const bool met = released_.wait_for(lock, timeout, ready);
    --waiters_;
    lock.release();
    return met;
  }

 private:
  friend class CheckedCondVar;
  std::mutex mu_;
  std::condition_variable released_;
  int waiters_ = 0;  // threads in Await, guarded by mu_
};

class ABSL_SCOPED_LOCKABLE CheckedMutexLock {
 public:
  explicit CheckedMutexLock(CheckedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~CheckedMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  CheckedMutexLock(const CheckedMutexLock&) = delete;
  CheckedMutexLock& operator=(const CheckedMutexLock&) = delete;

 private:
  CheckedMutex* const mu_;
};

// Waits on a condition of state `mu` guards. The caller must hold `mu` (released while waiting,
// held again on return, as with std::condition_variable); the analysis cannot tie this object's
// mutex to the caller's, so that is not annotated — the predicate, a lambda, is annotated instead.
class CheckedCondVar {
 public:
  explicit CheckedCondVar(CheckedMutex* mu) : mu_(mu) {}
  template <typename Predicate>
  void Wait(Predicate ready) {
    std::unique_lock<std::mutex> lock(mu_->mu_, std::adopt_lock);
    cv_.wait(lock, ready);
    lock.release();  // still held: the caller's lock releases it
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  CheckedMutex* const mu_;
  std::condition_variable cv_;
};

}  // namespace dtrun

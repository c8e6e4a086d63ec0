// Test support: a result that several test processes need (the digest of an uninterrupted
// training run, which the recovery tests compare against), computed once per CTest run instead of
// once per test. CTest runs each test in its own process, so a function-local static computed it
// again in every one: 28 tests, 28 identical runs of a real job.
#pragma once

#include <functional>
#include <string>

namespace dtrun::testing {

// Returns what `compute` returns, computed at most once per CTest run for `key` (a file name:
// letters, digits, '.', '_', '-') by whichever test asks first; the others wait for it and read it.
// An empty result is not kept (the next test computes it again, and fails its own way).
// CTest gives the tests DTRUN_TEST_MEMO_DIR, which its fixture `SuiteMemo.Clear` empties before the
// run's first test; without the variable (a test binary run by hand) every call computes.
std::string OncePerSuite(const std::string& key, const std::function<std::string()>& compute);

// A new directory for a result that OncePerSuite shares: under DTRUN_TEST_MEMO_DIR, so that it
// lasts the CTest run, else a temporary one removed when this process exits.
std::string MakeSuiteDir(const std::string& key);

}  // namespace dtrun::testing

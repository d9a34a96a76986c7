// expect.h — the checks of the standalone C++ tests (test/cpp/*.cc, built and
// run by the pytest files): a failed check prints what failed and counts it;
// main() ends with `return test_summary("name");`, non-zero when any failed.
// `verbose` checks print passes too ("ok  what"), for tests whose log names
// every case.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace purlin::test {

inline int& failures() {
  static int n = 0;
  return n;
}

inline void expect(bool ok, const std::string& what, bool verbose = false) {
  if (!ok) {
    std::printf("FAIL %s\n", what.c_str());
    ++failures();
  } else if (verbose) {
    std::printf("ok   %s\n", what.c_str());
  }
}

inline void expect_eq(int64_t got, int64_t want, const std::string& what) {
  if (got != want) {
    std::printf("FAIL %s: %lld, expected %lld\n", what.c_str(), static_cast<long long>(got),
                static_cast<long long>(want));
    ++failures();
  }
}

inline int test_summary(const char* name) {
  std::printf("%s: %d failed\n", name, failures());
  return failures() ? 1 : 0;
}

}  // namespace purlin::test

// What a spawned child wrote to its captured stdout, read once it has exited.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "agent/child_process.h"
#include "gtest/gtest.h"

namespace dtrun::testing {

// Waits for `p` to exit (it must not be reaped elsewhere), then reads its stdout to the end.
inline std::string OutputToExit(ChildProcess& p) {
  int status = 0;
  EXPECT_EQ(::waitpid(p.pid(), &status, 0), p.pid());
  p.MarkExited(status);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p.stdout_fd().get(), buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

}  // namespace dtrun::testing

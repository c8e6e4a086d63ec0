// The process's limit of open files, and how a user raises it: the workers' store holds one
// connection per worker of the job, so this limit bounds the job that one host can serve.
#pragma once

#include <cstddef>

namespace dtrun {

// The soft RLIMIT_NOFILE (dtrun lifts it to the hard one at start); 1024 if it cannot be read.
size_t OpenFileLimit();

// The ways to raise the hard limit, for messages that say a job needs more.
inline constexpr char kRaiseOpenFileLimit[] =
    "ulimit -Hn as root, LimitNOFILE= in a systemd unit, nofile in /etc/security/limits.conf, docker run "
    "--ulimit nofile=N:N";

}  // namespace dtrun

// Runs an SshLaunch (launcher/ssh_launch_plan.h): one ssh per host, each running that host's dtrun,
// whose output comes back here a whole line at a time ("[dtrun] " lines get the host's name).
//   - Ctrl-C, SIGTERM, SIGHUP or SIGQUIT here is passed to every host's dtrun on its stdin
//     (launcher/control_stdin.h), which acts on it as on its own signal; a second one escalates.
//   - If this dtrun dies, its ssh processes die with it (PR_SET_PDEATHSIG), the hosts' stdins end,
//     and every host stops its workers: no process is left anywhere.
//   - A host whose ssh ends with an error while fewer hosts than --nnodes' minimum are left (one
//     unreachable, its dtrun missing) is named, and the other hosts are stopped: they would
//     otherwise wait for it until the rendezvous gives up.
//   - Every wait is bounded: ssh processes still there --shutdown-timeout + 15 s after the stop
//     are killed.
// Returns the exit code: 128 + the signal if stopped by one, else the first failure of a host the
// job could not do without, else 0 (an elastic job that lost a host and finished succeeded).
#pragma once

#include "base/console_writer.h"
#include "launcher/ssh_launch_plan.h"

namespace dtrun {

// `command_line` (the token redacted) is what `dtrun status` and `dtrun kill` show for the launch.
int RunSshLaunch(const SshLaunch& launch, const std::string& command_line, const StdioWriters& stdio);

}  // namespace dtrun

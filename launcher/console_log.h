// dtrun's own log lines ("[dtrun] ...") go through the stderr ConsoleWriter, like the workers'
// output: whichever thread logs (the event loop, the store server, the rendezvous client) never
// blocks on a console nobody reads, and log lines keep their order relative to worker output.
// At exit, what is still queued is delivered within bounds a user controls.
#pragma once

#include <memory>
#include <vector>

#include "base/console_writer.h"

namespace dtrun {

// Makes a logger writing to `err` spdlog's default logger.
void LogToConsole(std::shared_ptr<ConsoleWriter> err);
// torchrun's LOGLEVEL (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case): dtrun's lines below it are
// not written. Unset or unknown: INFO.
void SetLogLevelFromEnvironment();

// Before dtrun exits: delivers what its consoles still hold. A reader that takes nothing is
// waited for until one of `signals` arrives (as for any program writing to a full pipe); after a
// job stopped by one of them (`exit_code` 128 + signal), for at most a second without progress.
void FinishConsoleOutput(const StdioWriters& stdio, const std::vector<int>& signals, int exit_code);

}  // namespace dtrun

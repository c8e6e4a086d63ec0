// dtrun's own log lines ("[dtrun] ...") go through the stderr ConsoleWriter, like the workers'
// output: whichever thread logs (the event loop, the store server, the rendezvous client) never
// blocks on a console nobody reads, and log lines keep their order relative to worker output.
// At exit, what is still queued is delivered within bounds a user controls.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/console_writer.h"

namespace dtrun {

// Makes a logger writing to `err` spdlog's default logger.
void LogToConsole(std::shared_ptr<ConsoleWriter> err);
// torchrun's LOGLEVEL (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case): dtrun's lines below it are
// not written. Unset or unknown: INFO.
void SetLogLevelFromEnvironment();

// Before dtrun exits: delivers what its consoles still hold, while the reader takes it. A reader
// that takes nothing gets kDrainStallLimit (DTRUN_CONSOLE_DRAIN_TIMEOUT seconds overrides it),
// a quarter second after a job stopped by one of `signals` (`exit_code` 128 + signal), none once one
// of them arrives now. What is dropped is said in one line on stderr, with `where_logs_are`.
inline constexpr std::chrono::seconds kDrainStallLimit{30};
void FinishConsoleOutput(const StdioWriters& stdio, const std::vector<int>& signals, int exit_code,
                         const std::string& where_logs_are = "");

}  // namespace dtrun

#include "launcher/console_log.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/env_names.h"
#include "base/signal_names.h"
#include "base/unique_fd.h"

#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

class ConsoleSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(std::shared_ptr<ConsoleWriter> writer) : writer_(std::move(writer)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    writer_->WriteLog(absl::string_view(line.data(), line.size()));
  }
  void flush_() override {}  // the writer's thread writes as soon as it can

 private:
  std::shared_ptr<ConsoleWriter> writer_;
};

}  // namespace

void LogToConsole(std::shared_ptr<ConsoleWriter> err) {
  auto logger = std::make_shared<spdlog::logger>("dtrun", std::make_shared<ConsoleSink>(std::move(err)));
  logger->set_pattern("[dtrun] %v");
  spdlog::set_default_logger(logger);
}

void SetLogLevelFromEnvironment() {
  const char* value = std::getenv(env::kLogLevel);
  if (!value) return;
  std::string level(value);
  std::transform(level.begin(), level.end(), level.begin(), ::toupper);
  static const std::map<std::string, spdlog::level::level_enum> kLevels = {
      {"DEBUG", spdlog::level::debug}, {"INFO", spdlog::level::info},   {"WARNING", spdlog::level::warn},
      {"WARN", spdlog::level::warn},   {"ERROR", spdlog::level::err},   {"CRITICAL", spdlog::level::critical},
      {"FATAL", spdlog::level::critical}};
  auto it = kLevels.find(level);
  if (it != kLevels.end()) spdlog::set_level(it->second);
}

namespace {

std::chrono::milliseconds DrainStallLimit() {
  double seconds = 0;
  const char* v = std::getenv("DTRUN_CONSOLE_DRAIN_TIMEOUT");
  if (v && absl::SimpleAtod(v, &seconds) && seconds >= 0 && seconds <= 86400) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return kDrainStallLimit;
}

// One line straight to stderr, never waiting: its reader may be the one that stopped reading.
void SayDropped(size_t bytes, const std::string& why, const std::string& where_logs_are) {
  std::string line = absl::StrCat("dtrun: dropped ", bytes, " bytes of output the console did not take (", why, "); ",
                                  where_logs_are.empty() ? "--log-dir DIR keeps every line in files"
                                                         : where_logs_are,
                                  "\n");
  const int flags = ::fcntl(STDERR_FILENO, F_GETFL);
  if (flags >= 0) ::fcntl(STDERR_FILENO, F_SETFL, flags | O_NONBLOCK);
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  if (flags >= 0) ::fcntl(STDERR_FILENO, F_SETFL, flags);
}

}  // namespace

void FinishConsoleOutput(const StdioWriters& stdio, const std::vector<int>& signals, int exit_code,
                         const std::string& where_logs_are) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  // The signals are blocked since the job started, so they wait in the signalfd.
  UniqueFd interrupt(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  const bool interrupted = std::find(signals.begin(), signals.end(), exit_code - 128) != signals.end();
  const std::chrono::milliseconds limit = interrupted ? std::chrono::milliseconds(250) : DrainStallLimit();
  bool written = true;
  if (stdio.err != stdio.out) written = stdio.err->WaitWritten(interrupt.get(), limit);
  written = written && stdio.out->WaitWritten(interrupt.get(), limit);
  if (written) return;
  const size_t dropped = stdio.out->unwritten() + (stdio.err != stdio.out ? stdio.err->unwritten() : 0);
  signalfd_siginfo info{};
  const bool signalled = ::read(interrupt.get(), &info, sizeof(info)) == sizeof(info);
  SayDropped(dropped,
             signalled ? absl::StrCat("stopped by ", SignalName(static_cast<int>(info.ssi_signo)))
                       : absl::StrCat("it took nothing for ", limit.count() / 1000.0, " s after the job ended"),
             where_logs_are);
}

}  // namespace dtrun

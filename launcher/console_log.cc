#include "launcher/console_log.h"

#include <signal.h>
#include <sys/signalfd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "base/env_names.h"
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

void FinishConsoleOutput(const StdioWriters& stdio, const std::vector<int>& signals, int exit_code) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  // The signals are blocked since the job started, so they wait in the signalfd.
  UniqueFd interrupt(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  const bool interrupted = std::find(signals.begin(), signals.end(), exit_code - 128) != signals.end();
  const std::chrono::milliseconds limit = interrupted ? std::chrono::seconds(1) : ConsoleWriter::kNoStallLimit;
  if (stdio.err != stdio.out && !stdio.err->WaitWritten(interrupt.get(), limit)) return;
  stdio.out->WaitWritten(interrupt.get(), limit);
}

}  // namespace dtrun

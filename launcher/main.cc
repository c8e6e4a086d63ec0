// dtrun: the torchrun-compatible launcher. `dtrun kill`, `status`, `rdzv-server` and `completion` are
// subcommands.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "agent/worker_env.h"
#include "base/env_names.h"
#include "base/exit_codes.h"
#include "base/mutex_mode.h"
#include "launcher/command_line_token.h"
#include "launcher/completion.h"
#include "launcher/console_log.h"
#include "launcher/control_stdin.h"
#include "launcher/kill_command.h"
#include "launcher/launch_config.h"
#include "launcher/rdzv_server_command.h"
#include "launcher/run_job.h"
#include "launcher/ssh_launcher.h"
#include "launcher/status_command.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace {

// A rendezvous host holds one connection per node: lift the soft fd limit to the hard one.
void RaiseFdLimit() {
  rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

int main(int argc, char** argv) {
  dtrun::SkipMutexDeadlockDetection();
  RaiseFdLimit();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "kill") return dtrun::KillCommand({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "status") return dtrun::StatusCommand({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "completion") return dtrun::CompletionCommand({args.begin() + 1, args.end()});

  // A closed console (dtrun ... | head) must not kill the launcher; writes just fail.
  ::signal(SIGPIPE, SIG_IGN);
  // Reading the terminal after being sent to the background fails with EIO instead of stopping
  // dtrun (and with it the whole job's supervision); see StdinRouter.
  ::signal(SIGTTIN, SIG_IGN);
  // Console writes happen on threads of their own: an unread console never stalls the job.
  const dtrun::StdioWriters stdio = dtrun::StdioWriters::Start();
  dtrun::LogToConsole(stdio.err);
  dtrun::SetLogLevelFromEnvironment();  // torchrun's LOGLEVEL
  if (!args.empty() && args[0] == "rdzv-server") {
    int rc = dtrun::RdzvServerCommand({args.begin() + 1, args.end()});
    dtrun::FinishConsoleOutput(stdio, {SIGINT, SIGTERM}, rc);
    return rc;
  }

  bool input_echoed_elsewhere = false;
  if (!args.empty() && args[0] == dtrun::kControlStdinFlag) {  // started by `dtrun -H` on another host
    args.erase(args.begin());
    absl::StatusOr<dtrun::ControlStart> start = dtrun::TakeControlStdin(std::chrono::seconds(60));
    if (!start.ok()) {
      std::fprintf(stderr, "dtrun: error: %s\n", std::string(start.status().message()).c_str());
      return 2;
    }
    ::setenv(dtrun::env::kRdzvToken, start->token.c_str(), 1);
    input_echoed_elsewhere = start->input_echoed;
  }
  // The token was copied into `args`; ps and /proc/PID/cmdline must not show it.
  const bool token_on_command_line = dtrun::HideTokenInArgv(argc, argv);
  dtrun::AcceptOperatorSpellings();
  std::map<std::string, std::string> env = dtrun::EnvironToMap(environ);
  absl::StatusOr<dtrun::ParsedCommandLine> parsed = dtrun::ParseCommandLine(args, env);
  if (!parsed.ok()) {
    std::fprintf(stderr, "dtrun: error: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  absl::Status loaded = parsed->config ? dtrun::LoadLaunchCredentials(*parsed->config) : absl::OkStatus();
  if (!loaded.ok()) {
    std::fprintf(stderr, "dtrun: error: %s\n", std::string(loaded.message()).c_str());
    return 2;
  }
  if (parsed->ssh_launch) {
    absl::Status files = dtrun::LoadSshLaunchFiles(*parsed->ssh_launch);
    if (!files.ok()) {
      std::fprintf(stderr, "dtrun: error: %s\n", std::string(files.message()).c_str());
      return 2;
    }
    const int rc = dtrun::RunSshLaunch(*parsed->ssh_launch, dtrun::RedactedCommandLine(args), stdio);
    dtrun::FinishConsoleOutput(stdio, {SIGINT, SIGTERM, SIGHUP, SIGQUIT}, rc);
    return rc;
  }
  if (!parsed->config) {
    std::fputs(parsed->exit_text.c_str(), stdout);
    return 0;
  }
  if (token_on_command_line) {
    spdlog::warn("--rdzv-token on the command line is visible to other users until dtrun hides it; prefer "
                 "--rdzv-token-file or the DTRUN_RDZV_TOKEN environment variable");
  }
  parsed->config->agent.input_echoed_elsewhere = input_echoed_elsewhere;
  if (!parsed->config->scheduler_note.empty()) spdlog::info("{}", parsed->config->scheduler_note);
  for (const std::string& note : parsed->config->notes) spdlog::info("{}", note);
  env.erase(dtrun::env::kRdzvToken);  // the workers never see the token
  const std::vector<int> signals = parsed->config->agent.signals_to_handle;
  const std::string where_logs_are =
      parsed->config->log_dir.empty() ? "" : "every line is in the log files under " + parsed->config->log_dir;
  absl::StatusOr<int> ran = dtrun::RunJob(std::move(*parsed->config), env, dtrun::RedactedCommandLine(args), stdio);
  if (!ran.ok()) spdlog::error("{}", std::string(ran.status().message()));
  const int rc = ran.ok() ? *ran : dtrun::ExitCodeFor(ran.status());
  dtrun::FinishConsoleOutput(stdio, signals, rc, where_logs_are);
  return rc;
}

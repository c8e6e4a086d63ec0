#include "launcher/status_command.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/agent_options.h"
#include "agent/run_registry.h"
#include "base/exit_codes.h"
#include "base/launch_layout.h"
#include "base/runtime_dir.h"
#include "base/status_macros.h"
#include "base/unix_time.h"
#include "base/untrusted_file.h"
#include "launcher/credentials.h"
#include "launcher/remote_job.h"
#include "launcher/subcommand_cli.h"
#include "nlohmann/json.hpp"
#include "status/status_json.h"
#include "status/status_table.h"

namespace dtrun {
namespace {

constexpr size_t kMaxSnapshotBytes = 4 << 20;

struct Flags {
  std::string run_id;
  std::string endpoint;
  CredentialFlags credentials;
  bool watch = false;
  bool json = false;
  double interval = 1;
};

// One job as shown, with where it came from.
struct Shown {
  status::JobStatus job;
  std::string note;  // a line under the header: the local launch, or why other nodes are missing
};

absl::StatusOr<status::JobStatus> AskService(const RemoteJob& remote) {
  DT_ASSIGN_OR_RETURN(rdzv::JobSummary s, remote.grpc->job_status(remote.options));
  status::JobStatus job;
  job.run_id = remote.options.run_id;
  job.phase = absl::AsciiStrToLower(rdzv::PhaseName(s.phase));
  job.round = s.round;
  job.restarts_used = s.restarts_used;
  job.nodes = std::move(s.progress);
  job.straggler = std::move(s.straggler);
  return job;
}

// A `dtrun -H` launcher on this machine: every host's rows, from the job's rendezvous, asked with
// the token the launcher kept unless the user gave credentials.
Shown ShowSshLaunch(const LaunchRecord& r, const std::string& launch_dir, const Flags& flags, Shown shown) {
  CredentialFlags credentials = flags.credentials;
  if (credentials.token.empty() && credentials.token_file.empty()) {
    credentials.token_file = launch_layout::TokenFile(launch_dir);
  }
  absl::StatusOr<RemoteJob> remote = ConnectRemote(r.endpoint, r.run_id, credentials);
  absl::StatusOr<status::JobStatus> whole = remote.ok() ? AskService(*remote) : remote.status();
  if (whole.ok()) {
    shown.job = std::move(*whole);
  } else {
    shown.note += absl::StrCat("\n(the rendezvous at ", r.endpoint, " did not answer: ", whole.status().message(), ")");
  }
  return shown;
}

// The agent's snapshot of a launch on this machine, and for a multi-node job every node's rows
// from its rendezvous (the local rows if the service cannot be asked).
Shown ShowLaunch(const LaunchRecord& r, const std::string& runtime_dir, const Flags& flags) {
  Shown shown;
  shown.job.run_id = r.run_id;
  shown.job.phase = "starting";
  const long long age = UnixMillisNow() / 1000 - r.started_unix;
  shown.note = absl::StrCat(r.endpoint.empty() ? "dtrun" : "dtrun -H launcher", " pid ", r.pid, ", up ",
                            status::HumanSeconds(static_cast<double>(age)), ": ", r.command.substr(0, 100));
  const std::string launch_dir = launch_layout::LaunchDir(runtime_dir, r.launch_id);
  if (!r.endpoint.empty()) return ShowSshLaunch(r, launch_dir, flags, std::move(shown));
  const std::string path = launch_layout::StatusSnapshot(launch_dir);
  absl::StatusOr<std::string> text = ReadUntrustedFile(path, kMaxSnapshotBytes);
  if (!text.ok()) return shown;  // not written yet
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<status::JobStatus> local = status::JobStatusFromJson(j, status::kMaxRanksPerNode);
  if (!local.ok()) {
    shown.note += absl::StrCat("\n(unreadable status file ", path, ": ", local.status().message(), ")");
    return shown;
  }
  shown.job = std::move(*local);
  auto endpoint = j.find("endpoint");
  if (endpoint == j.end() || !endpoint->is_string()) return shown;
  absl::StatusOr<RemoteJob> remote = ConnectRemote(endpoint->get<std::string>(), r.run_id, flags.credentials);
  absl::StatusOr<status::JobStatus> whole = remote.ok() ? AskService(*remote) : remote.status();
  if (whole.ok()) {
    shown.job = std::move(*whole);
  } else {
    shown.note += absl::StrCat("\n(this node only: the rendezvous at ", endpoint->get<std::string>(),
                               " did not answer: ", whole.status().message(),
                               "; give dtrun status the job's --rdzv-token/TLS flags)");
  }
  return shown;
}

absl::StatusOr<std::vector<Shown>> Collect(const Flags& flags) {
  std::vector<Shown> out;
  if (!flags.endpoint.empty()) {
    DT_ASSIGN_OR_RETURN(RemoteJob remote,
                        ConnectRemote(flags.endpoint, flags.run_id.empty() ? "none" : flags.run_id, flags.credentials));
    DT_ASSIGN_OR_RETURN(status::JobStatus job, AskService(remote));
    out.push_back({std::move(job), ""});
    return out;
  }
  DT_ASSIGN_OR_RETURN(std::string dir, RuntimeDir());
  const std::vector<LaunchRecord> launches = ListLaunches();
  // A -H launcher shows its whole job: a host of it on this machine too would show it twice.
  std::set<std::string> launched_here;
  for (const LaunchRecord& r : launches) {
    if (!r.endpoint.empty()) launched_here.insert(r.run_id);
  }
  for (const LaunchRecord& r : launches) {
    if (r.endpoint.empty() && launched_here.count(r.run_id) > 0) continue;
    if (flags.run_id.empty() || r.run_id == flags.run_id) out.push_back(ShowLaunch(r, dir, flags));
  }
  return out;
}

std::string Render(std::vector<Shown>& jobs, const Flags& flags) {
  const int64_t now = UnixMillisNow();
  std::string out;
  for (Shown& s : jobs) {
    status::AgeTo(s.job, now);
    if (flags.json) {
      out += status::ToJson(s.job).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      continue;
    }
    out += status::RenderHeader(s.job);
    if (!s.note.empty()) out += s.note + "\n";
    out += status::RenderRows(s.job) + "\n";
  }
  if (jobs.empty() && !flags.json) {
    out = flags.run_id.empty() ? "no dtrun jobs running\n" : absl::StrCat("no dtrun job with run id ", flags.run_id, " on this machine\n");
  }
  return out;
}

void SleepFor(double seconds) {
  timespec ts{static_cast<time_t>(seconds), static_cast<long>((seconds - std::floor(seconds)) * 1e9)};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}


constexpr char kStatusAbout[] =
    "dtrun status: every worker of this user's dtrun jobs on this machine (all nodes of a multi-node job), with "
    "its step, speed, section, heartbeat, CPU, memory and GPU";

void DefineStatusFlags(CLI::App& app, Flags& flags) {
  app.add_option("--run-id,--rdzv-id", flags.run_id, "Only this job");
  app.add_option("--endpoint", flags.endpoint, "Ask a multi-node job's rendezvous at HOST:PORT (from any machine)");
  app.add_flag("--watch,-w", flags.watch, "Refresh until interrupted or the jobs end (in place on a terminal)");
  app.add_option("--interval", flags.interval, "Seconds between refreshes with --watch")->capture_default_str();
  app.add_flag("--json", flags.json, "One dtrun.status/v1 JSON document per job and line (docs/DESIGN.md)");
  AddCredentialFlags(app, flags.credentials);  // a multi-node job's service
}

}  // namespace

std::vector<CliOption> StatusCommandFlags() {
  return DescribeCommand(kStatusAbout, "dtrun status", &DefineStatusFlags);
}

int StatusCommand(const std::vector<std::string>& args) {
  CLI::App app(kStatusAbout, "dtrun status");
  Flags flags;
  DefineStatusFlags(app, flags);
  if (std::optional<int> rc = ParseSubcommand(app, args)) return *rc;
  if (!std::isfinite(flags.interval) || flags.interval < 0.1 || flags.interval > 3600) {
    std::fprintf(stderr, "dtrun status: error: --interval %g: expected seconds between 0.1 and 3600\n", flags.interval);
    return 2;
  }
  const bool in_place = flags.watch && !flags.json && ::isatty(STDOUT_FILENO);
  bool seen = false;  // --watch ends once the jobs it showed are gone
  for (;;) {
    absl::StatusOr<std::vector<Shown>> jobs = Collect(flags);
    if (!jobs.ok()) {
      std::fprintf(stderr, "dtrun status: error: %s\n", std::string(jobs.status().message()).c_str());
      return ExitCodeFor(jobs.status());
    }
    const std::string text = Render(*jobs, flags);
    std::fputs(in_place ? absl::StrCat("\033[H\033[2J", text).c_str() : text.c_str(), stdout);
    std::fflush(stdout);
    if (!flags.watch || (seen && jobs->empty())) return 0;
    seen = seen || !jobs->empty();
    SleepFor(flags.interval);
  }
}

}  // namespace dtrun

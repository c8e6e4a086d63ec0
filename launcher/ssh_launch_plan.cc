#include "launcher/ssh_launch_plan.h"

#include <algorithm>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/env_names.h"
#include "base/random_hex.h"
#include "base/status_macros.h"
#include "base/untrusted_file.h"
#include "launcher/launch_flags.h"
#include "launcher/launch_values.h"

namespace dtrun {
namespace {

constexpr int kMaxSlots = 1024;  // as --nproc-per-node
constexpr size_t kMaxHostfile = 4 << 20;

// What a training job reads from its environment, as a login shell on another host would not set
// it: the interpreter and library paths, and the libraries' own settings.
constexpr const char* kForwardedNames[] = {"PATH",        "LD_LIBRARY_PATH", "PYTHONPATH",        "PYTHONHOME",
                                           "VIRTUAL_ENV", "CONDA_PREFIX",    "CONDA_DEFAULT_ENV", "PYTHON_EXEC",
                                           "LOGLEVEL",    "OMP_NUM_THREADS", "MKL_NUM_THREADS",   "HF_HOME",
                                           "TMPDIR"};
constexpr const char* kForwardedPrefixes[] = {"NCCL_",  "GLOO_", "TORCH_", "PYTORCH_", "CUDA_",
                                              "CUDNN_", "UCX_",  "FI_",    "DTRUN_"};

// The flags the plan sets for every host itself (their values are read from the parsed flags);
// each takes a value.
constexpr const char* kOwnedFlags[] = {
    "-H",           "--hosts",          "--hostfile",       "--ssh-command", "--remote-dtrun",    "-x",
    "--env",        "--nproc-per-node", "--nproc_per_node", "--nnodes",      "--rdzv-id",         "--rdzv_id",
    "--rdzv-conf",  "--rdzv_conf",      "--rdzv-token",     "--rdzv_token",  "--rdzv-token-file", "--master-port",
    "--master_port"};
// Where the nodes meet is the plan's: the first host.
constexpr const char* kRefusedFlags[] = {"--node-rank",   "--rdzv-endpoint", "--rdzv-backend",
                                         "--master-addr", "--local-addr",    "--standalone"};

// True if args[i] is `flag` (its value next), `flag=VALUE`, or a short flag with its value joined
// (-Hhost); `takes_next` says whether the next word is its value.
bool IsFlag(const std::string& word, absl::string_view flag, bool& takes_next) {
  takes_next = word == flag;
  if (takes_next) return true;
  if (absl::StartsWith(word, absl::StrCat(flag, "="))) return true;
  return flag.size() == 2 && word.size() > 2 && absl::StartsWith(word, flag) && word[1] != '-';
}

std::vector<std::string> WithoutOwnedFlags(const std::vector<std::string>& args, size_t program_at) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < args.size(); ++i) {
    bool owned = false, takes_next = false;
    for (const char* flag : kOwnedFlags) {
      if (i < program_at && IsFlag(args[i], flag, takes_next)) {
        owned = true;
        break;
      }
    }
    if (!owned) {
      kept.push_back(args[i]);
    } else if (takes_next) {
      ++i;
    }
  }
  return kept;
}

bool Forwarded(const std::string& name) {
  for (const char* n : kForwardedNames) {
    if (name == n) return true;
  }
  for (const char* p : kForwardedPrefixes) {
    if (absl::StartsWith(name, p)) return true;
  }
  return false;
}

bool IsEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ForwardedEnvironment(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    if (Forwarded(name) && IsEnvName(name)) out[name] = value;
  }
  for (const std::string& x : extra) {
    const size_t eq = x.find('=');
    const std::string name = x.substr(0, eq);
    if (!IsEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("-x ", x, ": '", name, "' is not a variable name; write -x NAME or -x NAME=VALUE"));
    }
    if (eq != std::string::npos) {
      out[name] = x.substr(eq + 1);
    } else if (auto it = env.find(name); it != env.end()) {
      out[name] = it->second;
    }  // unset here: not set there either
  }
  out.erase(env::kRdzvToken);  // sent on stdin, never on a command line (DTRUN_* and -x would take it)
  return std::vector<std::pair<std::string, std::string>>(out.begin(), out.end());
}

std::vector<std::string> RemoteDtrunArgv(const SshLaunch& l, size_t i) {
  const HostSlots& h = l.hosts[i];
  std::string conf = l.rdzv_conf;
  if (conf.find("is_host") == std::string::npos) {
    absl::StrAppend(&conf, conf.empty() ? "" : ",", "is_host=", i == 0 ? "1" : "0");
  }
  std::vector<std::string> argv = {
      "--nnodes",       l.nnodes, "--nproc-per-node", h.slots > 0 ? std::to_string(h.slots) : l.nproc,
      "--rdzv-backend", "c10d",   "--rdzv-endpoint",  l.endpoint,
      "--rdzv-id",      l.run_id, "--rdzv-conf",      conf};
  // With c10d a preference: the first round places the hosts in the list's order (rank 0 on the
  // first). Hosts past --nnodes's maximum are spares and take what is free, in join order.
  if (static_cast<int>(i) < l.max_nodes) argv.insert(argv.end(), {"--node-rank", std::to_string(i)});
  return argv;
}

std::string RemoteCommand(const SshLaunch& l, size_t i) {
  std::vector<std::string> words = {"exec", "env"};
  for (const auto& [name, value] : l.env) words.push_back(ShellQuote(absl::StrCat(name, "=", value)));
  words.push_back(ShellQuote(l.remote_dtrun));
  words.push_back(kControlStdinFlag);
  for (const std::string& w : RemoteDtrunArgv(l, i)) words.push_back(ShellQuote(w));
  for (const std::string& w : l.node_args) words.push_back(ShellQuote(w));
  return absl::StrCat("cd ", ShellQuote(l.cwd), " && ", absl::StrJoin(words, " "));
}

std::vector<std::string> SshArgv(const SshLaunch& l, size_t i) {
  std::vector<std::string> argv = l.ssh;
  argv.push_back(l.hosts[i].name);
  argv.push_back(RemoteCommand(l, i));
  return argv;
}

absl::StatusOr<SshLaunch> PlanSshLaunch(const RawFlags& f, const CLI::App& app, const SshLaunchInputs& in) {
  if (!f.hosts.empty() && !f.hostfile.empty()) return BadFlag("give -H or --hostfile, not both");
  for (const char* flag : kRefusedFlags) {
    if (app.get_option(flag)->count() > 0) {
      return BadFlag(absl::StrCat(flag,
                                  " cannot be given with -H/--hostfile: every host runs as a node of one "
                                  "job whose rendezvous the first host serves; drop ",
                                  flag));
    }
  }
  SshLaunch l;
  l.ssh = absl::StrSplit(f.ssh_command, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (l.ssh.empty()) return BadFlag("--ssh-command is empty; give the remote shell, e.g. \"ssh -p 2222\"");
  const std::string& program = l.ssh[0];
  if (program == "ssh" || absl::EndsWith(program, "/ssh")) {
    // After the user's options, which win (ssh keeps an option's first value). No password
    // prompt: ssh runs in the background and would stop at the terminal forever. And a host that
    // stops answering (a cut link) ends its ssh within a minute instead of the kernel's TCP timeout.
    l.ssh.insert(l.ssh.end(), {"-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=6"});
  }
  l.remote_dtrun = f.remote_dtrun.empty() ? in.this_dtrun : f.remote_dtrun;
  l.cwd = in.cwd;
  DT_ASSIGN_OR_RETURN(l.env, ForwardedEnvironment(in.env, f.forward_env));
  l.node_args = WithoutOwnedFlags(in.args, in.program_at);
  if (app.get_option("--log-line-prefix-template")->count() == 0 && !in.env.count(env::kLogLinePrefixTemplate)) {
    // Several hosts on one console: the global rank tells the lines apart, not the local one.
    l.node_args.insert(l.node_args.begin(), {"--log-line-prefix-template", "[${role_name}${rank}]:"});
  }
  l.nproc = f.nproc;
  const bool nnodes_given = app.get_option("--nnodes")->count() > 0;
  l.nnodes_given = nnodes_given ? f.nnodes : "";
  l.run_id = app.get_option("--rdzv-id")->count() > 0 ? f.rdzv_id : RandomHex(12);
  l.rdzv_conf = f.rdzv_conf;
  if (app.get_option("--master-port")->count() > 0) l.port = f.master_port;
  if (l.port <= 0 || l.port > 65535) {
    return BadFlag(absl::StrCat("--master-port ", l.port, " is not a port; use 1..65535"));
  }
  l.shutdown_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000));
  l.hostfile = f.hostfile;
  l.credentials = f.credentials;
  if (!f.hosts.empty()) {
    DT_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts, ParseHostList(f.hosts, kMaxSlots));
    DT_RETURN_IF_ERROR(SetHosts(l, std::move(hosts)));
  }
  return l;
}

absl::Status SetHosts(SshLaunch& l, std::vector<HostSlots> hosts) {
  l.hosts = std::move(hosts);
  const int n = static_cast<int>(l.hosts.size());
  l.nnodes = l.nnodes_given.empty() ? absl::StrCat(n, ":", n) : l.nnodes_given;
  DT_ASSIGN_OR_RETURN(auto nodes, ParseNnodes(l.nnodes));
  if (nodes.first > n) {
    return BadFlag(absl::StrCat("--nnodes ", l.nnodes, " needs ", nodes.first, " hosts, but ", n,
                                " are listed; list more hosts or lower --nnodes"));
  }
  l.min_nodes = nodes.first;
  l.max_nodes = nodes.second;
  l.endpoint = absl::StrCat(l.hosts[0].endpoint_host(), ":", l.port);
  return absl::OkStatus();
}

absl::Status LoadSshLaunchFiles(SshLaunch& l) {
  if (!l.hostfile.empty()) {
    absl::StatusOr<std::string> text = ReadUntrustedFile(l.hostfile, kMaxHostfile);
    if (!text.ok()) {
      return BadFlag(absl::StrCat("--hostfile: ", text.status().message(), "; give a readable file"));
    }
    DT_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts, ParseHostfile(*text, l.hostfile, kMaxSlots));
    DT_RETURN_IF_ERROR(SetHosts(l, std::move(hosts)));
  }
  CredentialFlags token_only = l.credentials;  // the TLS files are read on each host
  token_only.tls_cert = token_only.tls_key = token_only.tls_ca = "";
  DT_ASSIGN_OR_RETURN(Credentials creds, LoadCredentials(token_only));
  // Without one, a fresh token: only the hosts this dtrun started can join.
  l.token = creds.token.empty() ? RandomHex(32) : creds.token;
  return absl::OkStatus();
}

}  // namespace dtrun

#include "tests/support/slurm_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/support/poll.h"

namespace dtrun::testing {
namespace {

constexpr const char* kTools[] = {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged",
                                  "/usr/sbin/mungekey", "/usr/bin/sbatch", "/usr/bin/srun", "/usr/bin/unshare"};

std::string NodeName(int i) { return "n" + std::to_string(i); }

}  // namespace

std::string SlurmCluster::Unavailable() {
  std::string why = NetnsCluster::Unavailable();
  if (!why.empty()) return why;
  for (const char* tool : kTools) {
    if (::access(tool, X_OK) != 0) return absl::StrCat("no ", tool, " (apt install slurm-wlm munge)");
  }
  return "";
}

SlurmCluster::SlurmCluster(int nodes) : net_(std::make_unique<NetnsCluster>(nodes + 1)), dir_(MakeTempDir()) {
  if (!net_->ok()) {
    error_ = "could not create the test hosts";
    return;
  }
  std::string hosts = net_->address(0) + " ctl\n";
  for (int i = 0; i < nodes; ++i) absl::StrAppend(&hosts, net_->address(i + 1), " ", NodeName(i), "\n");
  for (int h = 0; h <= nodes; ++h) net_->SetHosts(h, hosts);
  // munge: one key, one daemon; its socket is a file, reached from every namespace.
  std::filesystem::create_directories(dir_ + "/munge");
  ::chmod((dir_ + "/munge").c_str(), 0711);
  if (RunToEnd({"/usr/sbin/mungekey", "--create", "--keyfile=" + dir_ + "/munge/munge.key"}).first != 0) {
    error_ = "mungekey failed";
    return;
  }
  daemons_.push_back(std::make_unique<Harness>(std::vector<std::string>{
      "/usr/sbin/munged", "--foreground", "--force", "--socket=" + dir_ + "/munge/munge.socket",
      "--key-file=" + dir_ + "/munge/munge.key", "--pid-file=" + dir_ + "/munge/munged.pid",
      "--log-file=" + dir_ + "/munge/munged.log", "--seed-file=" + dir_ + "/munge/munged.seed"}));
  // No cgroup-based tracking: processes are tracked through /proc; slurmd still opens the cgroup
  // v1 hierarchies, mounted again in each node's own mount namespace (node.sh).
  conf_ = dir_ + "/slurm.conf";
  std::ofstream conf(conf_);
  conf << "ClusterName=dtrun\nSlurmctldHost=ctl(" << net_->address(0) << ")\nSlurmUser=root\nSlurmdUser=root\n"
       // Credentials expire after 10 s, not 120: Slurm waits that long before it starts a requeued job.
       << "AuthType=auth/munge\nAuthInfo=socket=" << dir_ << "/munge/munge.socket,cred_expire=10\nCredType=cred/munge\n"
       << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_ << "/spool/%n\n"
       << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_ << "/slurmd.%n.pid\n"
       << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\nSlurmdLogFile=" << dir_ << "/slurmd.%n.log\n"
       << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\nMailProg=/bin/true\n"
       << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSchedulerType=sched/builtin\n"
       << "ReturnToService=2\nJobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
       // The main scheduler looks at pending jobs every 2 s, not 60: a requeued job becomes
       // eligible when its credentials expire, and waits for that loop to be started.
       << "JobRequeue=1\nKillWait=5\nSchedulerParameters=sched_interval=2\n";
  for (int i = 0; i < nodes; ++i) {
    conf << "NodeName=" << NodeName(i) << " NodeAddr=" << net_->address(i + 1) << " CPUs=2 State=UNKNOWN\n";
    std::filesystem::create_directories(dir_ + "/spool/" + NodeName(i));
  }
  conf << "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  // A tree of switches, one leaf per node under one spine: Slurm tells each task where its node
  // hangs (SLURM_TOPOLOGY_ADDR "spine.leaf0.n0"), as on a cluster whose topology.conf is filled in.
  conf << "TopologyPlugin=topology/tree\n";
  conf.close();
  std::ofstream topology(dir_ + "/topology.conf");
  for (int i = 0; i < nodes; ++i) topology << "SwitchName=leaf" << i << " Nodes=" << NodeName(i) << "\n";
  topology << "SwitchName=spine Switches=leaf[0-" << nodes - 1 << "]\n";
  topology.close();
  std::ofstream(dir_ + "/cgroup.conf") << "CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n";
  std::ofstream node(dir_ + "/node.sh");
  node << "#!/bin/sh\n# node.sh NAME CONF: slurmd with its own host name and the machine's cgroup v1 hierarchies\n"
       << "mount -t tmpfs none /sys/fs/cgroup\n"
       << "for c in cpu cpuacct cpuset memory devices freezer blkio pids; do\n"
       << "  mkdir -p /sys/fs/cgroup/$c && mount -t cgroup -o $c cgroup /sys/fs/cgroup/$c\ndone\n"
       << "hostname \"$1\"\nexec /usr/sbin/slurmd -D -f \"$2\" -N \"$1\"\n";
  node.close();
  ::chmod((dir_ + "/node.sh").c_str(), 0755);
  std::vector<std::string> ctl = net_->Exec(0);
  ctl.insert(ctl.end(), {"/usr/bin/unshare", "--uts", "/bin/sh", "-c",
                         "hostname ctl && exec /usr/sbin/slurmctld -D -f " + conf_});
  daemons_.push_back(std::make_unique<Harness>(ctl, Env()));
  for (int i = 0; i < nodes; ++i) {
    std::vector<std::string> d = net_->Exec(i + 1);
    d.insert(d.end(), {"/usr/bin/unshare", "--uts", "--mount", dir_ + "/node.sh", NodeName(i), conf_});
    daemons_.push_back(std::make_unique<Harness>(d, Env()));
  }
  if (!WaitForIdleNodes(nodes)) error_ = "the Slurm nodes did not come up; see " + dir_ + "/slurmd.n0.log";
}

std::pair<int, std::string> SlurmCluster::Run(std::vector<std::string> argv, std::map<std::string, std::string> env) const {
  std::vector<std::string> full = Exec(0);
  full.insert(full.end(), argv.begin(), argv.end());
  env.merge(Env());
  return RunToEnd(full, env);
}

bool SlurmCluster::WaitForIdleNodes(int nodes) {
  return PollUntil(
      [&] {
        auto [rc, out] = Run({"/usr/bin/sinfo", "-h", "-N", "-o", "%t"});
        size_t idle = 0;
        for (size_t at = out.find("idle"); at != std::string::npos; at = out.find("idle", at + 1)) ++idle;
        return rc == 0 && idle == static_cast<size_t>(nodes);
      },
      std::chrono::seconds(60));
}

}  // namespace dtrun::testing

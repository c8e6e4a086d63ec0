#include "tests/support/netns_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

bool Ip(std::vector<std::string> args) {
  args.insert(args.begin(), "ip");
  return RunToEnd(args).first == 0;
}

// Kills whatever still runs in the namespace: a test's processes end with the test, including those
// a daemon started and did not reap (a Slurm job step outlives slurmd). Repeated while any
// remain, since one may fork as it dies.
void KillEverythingIn(const std::string& ns) {
  for (int pass = 0; pass < 10; ++pass) {
    auto [rc, out] = RunToEnd({"ip", "netns", "pids", ns});
    if (rc != 0 || out.empty()) return;
    std::istringstream pids(out);
    for (pid_t pid; pids >> pid;) {
      if (pid > 1 && pid != ::getpid()) ::kill(pid, SIGKILL);
    }
  }
}

std::string Veth(const std::string& prefix, int i, bool sw) {
  return prefix + "v" + std::to_string(i) + (sw ? "s" : "");
}

}  // namespace

std::string NetnsCluster::Unavailable() {
  if (::geteuid() != 0) return "multi-node tests need root (network namespaces)";
  if (RunToEnd({"ip", "netns", "list"}).first != 0) return "iproute2 'ip netns' is not available";
  return "";
}

NetnsCluster::NetnsCluster(int hosts) {
  prefix_ = "dt" + std::to_string(::getpid() % 100000);
  const std::string subnet = "198.18." + std::to_string(::getpid() % 250 + 1) + ".";
  // RFC 4193 unique local addresses; "nodad": usable at once, with no duplicate detection to wait for.
  const std::string subnet6 = "fd00:" + std::to_string(::getpid() % 9000 + 1) + "::";
  const std::string sw = prefix_ + "sw";
  ok_ = Ip({"netns", "add", sw});
  namespaces_.push_back(sw);
  ok_ = ok_ && Ip({"-n", sw, "link", "add", "br0", "type", "bridge"}) &&
        Ip({"-n", sw, "link", "set", "br0", "up"});
  for (int i = 0; ok_ && i < hosts; ++i) {
    const std::string ns = prefix_ + "h" + std::to_string(i);
    const std::string addr = subnet + std::to_string(10 + i);
    const std::string addr6 = subnet6 + std::to_string(10 + i);
    ok_ = Ip({"netns", "add", ns});
    namespaces_.push_back(ns);
    ok_ = ok_ && Ip({"link", "add", Veth(prefix_, i, false), "type", "veth", "peer", "name", Veth(prefix_, i, true)}) &&
          Ip({"link", "set", Veth(prefix_, i, false), "netns", ns, "name", "eth0"}) &&
          Ip({"link", "set", Veth(prefix_, i, true), "netns", sw}) &&
          Ip({"-n", sw, "link", "set", Veth(prefix_, i, true), "master", "br0", "up"}) &&
          Ip({"-n", ns, "addr", "add", addr + "/24", "dev", "eth0"}) &&
          Ip({"-n", ns, "addr", "add", addr6 + "/64", "dev", "eth0", "nodad"}) &&
          Ip({"-n", ns, "link", "set", "eth0", "up"}) && Ip({"-n", ns, "link", "set", "lo", "up"});
    addrs_.push_back(addr);
    addrs6_.push_back(addr6);
  }
}

NetnsCluster::~NetnsCluster() {
  for (const std::string& ns : namespaces_) {
    KillEverythingIn(ns);
    std::error_code ec;
    std::filesystem::remove_all("/etc/netns/" + ns, ec);
    Ip({"netns", "del", ns});
  }
}

bool NetnsCluster::SetHosts(int host, const std::string& lines) {
  const std::string dir = "/etc/netns/" + prefix_ + "h" + std::to_string(host);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(dir + "/hosts", std::ios::trunc);
  out << "127.0.0.1 localhost\n::1 localhost\n" << lines;
  return static_cast<bool>(out.flush());
}

bool NetnsCluster::AppendHosts(int host, const std::string& lines) {
  std::ofstream out("/etc/netns/" + prefix_ + "h" + std::to_string(host) + "/hosts", std::ios::app);
  out << lines;
  return static_cast<bool>(out.flush());
}

std::vector<std::string> NetnsCluster::Exec(int host) const {
  return {"ip", "netns", "exec", prefix_ + "h" + std::to_string(host)};
}

void NetnsCluster::SetLink(int host, bool up) {
  Ip({"-n", prefix_ + "h" + std::to_string(host), "link", "set", "eth0", up ? "up" : "down"});
}

bool NetnsCluster::AllowOnlyTcpPort(int host, int port) {
  std::vector<std::string> nft = {"ip", "netns", "exec", prefix_ + "h" + std::to_string(host), "nft"};
  auto run = [&](const std::string& command) {
    std::vector<std::string> argv = nft;
    argv.push_back(command);
    return RunToEnd(argv).first == 0;
  };
  return run("add table inet dtrun_test") &&
         run("add chain inet dtrun_test input { type filter hook input priority 0; policy drop; }") &&
         run("add rule inet dtrun_test input iif lo accept") &&
         run("add rule inet dtrun_test input ct state established,related accept") &&
         run("add rule inet dtrun_test input tcp dport " + std::to_string(port) + " accept");
}

void NetnsTest::SetUp() {
  std::string why = NetnsCluster::Unavailable();
  if (!why.empty()) GTEST_SKIP() << why;
}

void NetnsTest::Cluster(int hosts) {
  cluster_ = std::make_unique<NetnsCluster>(hosts);
  ASSERT_TRUE(cluster_->ok()) << "could not create the test hosts";
}

}  // namespace dtrun::testing

// Test hosts on one machine: N network namespaces, each with its own address on a bridge that
// lives in a further "switch" namespace (nothing touches the test machine's own network).
// Addresses are from 198.18.0.0/15 (RFC 2544, reserved for network tests), and IPv6 ones from
// fd00::/8, and exist only inside these namespaces. Needs root and iproute2; Available() says why not.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun::testing {

class NetnsCluster {
 public:
  // Empty if namespaces can be made here; else the reason (for GTEST_SKIP).
  static std::string Unavailable();

  explicit NetnsCluster(int hosts);
  ~NetnsCluster();  // deletes every namespace it made
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  bool ok() const { return ok_; }
  const std::string& address(int host) const { return addrs_[host]; }
  // The host's IPv6 address (fd00:…, a unique local address), beside its IPv4 one.
  const std::string& address6(int host) const { return addrs6_[host]; }
  // argv prefix that runs a command inside host `i`'s namespace.
  std::vector<std::string> Exec(int host) const;
  // Takes host `i`'s link down (a cut cable) or back up.
  void SetLink(int host, bool up);
  // A firewall on host `i` (nftables): it accepts new TCP connections on `port` only (replies to
  // its own connections still pass). False if nftables is missing.
  bool AllowOnlyTcpPort(int host, int port);
  // Host `i`'s /etc/hosts: `ip netns exec` mounts /etc/netns/<namespace>/hosts over /etc/hosts for
  // commands started after the file exists; later appends show in those already running (as a
  // cluster's DNS starts to answer for a name). localhost is always in it. Removed with the cluster.
  bool SetHosts(int host, const std::string& lines);
  bool AppendHosts(int host, const std::string& lines);

 private:
  std::string prefix_;
  std::vector<std::string> addrs_;
  std::vector<std::string> addrs6_;
  std::vector<std::string> namespaces_;
  bool ok_ = false;
};

// A fixture whose tests run on such hosts. Where namespaces cannot be made the tests are skipped
// in SetUp, so no test body runs (a skip inside a helper would return from the helper alone, and
// the body would go on without hosts).
class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // `hosts` test hosts in cluster_.
  void Cluster(int hosts);

  std::unique_ptr<NetnsCluster> cluster_;
};

}  // namespace dtrun::testing

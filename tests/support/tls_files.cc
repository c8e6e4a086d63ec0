#include "tests/support/tls_files.h"

#include <fstream>
#include <sstream>

#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

bool OpenSsl(std::vector<std::string> args) {
  args.insert(args.begin(), "openssl");
  return RunToEnd(args).first == 0;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::vector<std::string> TlsFiles::Flags() const {
  if (!ok()) return {};
  return {"--rdzv-tls-cert", cert, "--rdzv-tls-key", key, "--rdzv-tls-ca", ca};
}

rdzv::TlsCredentials TlsFiles::Credentials() const {
  rdzv::TlsCredentials tls;
  if (!ok()) return tls;
  tls.cert_pem = Contents(cert);
  tls.key_pem = Contents(key);
  tls.ca_pem = Contents(ca);
  return tls;
}

TlsFiles MakeTlsFiles(const std::string& dir, const std::string& name, const std::string& subject_alt_name) {
  const std::string ca = dir + "/" + name + "-ca", node = dir + "/" + name;
  const bool ok =
      OpenSsl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key", "-out", ca + ".pem", "-days",
               "1", "-subj", "/CN=dtrun-test-ca-" + name}) &&
      OpenSsl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", node + ".key", "-out", node + ".csr", "-subj",
               "/CN=" + name, "-addext", "subjectAltName=" + subject_alt_name}) &&
      OpenSsl({"x509", "-req", "-in", node + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-CAcreateserial",
               "-out", node + ".pem", "-days", "1", "-copy_extensions", "copy"});
  if (!ok) return {};
  return TlsFiles{node + ".pem", node + ".key", ca + ".pem"};
}

}  // namespace dtrun::testing

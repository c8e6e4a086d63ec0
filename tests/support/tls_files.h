// Test certificates, made with the openssl command: a CA and a certificate signed by it.
#pragma once

#include <string>
#include <vector>

#include "rendezvous/rendezvous_options.h"

namespace dtrun::testing {

struct TlsFiles {
  std::string cert, key, ca;  // paths; empty if openssl is missing or failed
  bool ok() const { return !cert.empty(); }
  // --rdzv-tls-cert/--rdzv-tls-key/--rdzv-tls-ca with these files (none if !ok()).
  std::vector<std::string> Flags() const;
  // The files' contents, as the launcher hands them to the gRPC module.
  rdzv::TlsCredentials Credentials() const;
};

// `<name>-ca.pem`, `<name>.pem` and `<name>.key` in `dir`: a CA of its own and a certificate for
// `subject_alt_name` (openssl's syntax, e.g. "IP:127.0.0.1") signed by it.
TlsFiles MakeTlsFiles(const std::string& dir, const std::string& name,
                      const std::string& subject_alt_name = "IP:127.0.0.1");

}  // namespace dtrun::testing

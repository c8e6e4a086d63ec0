// The rendezvous credentials — the token and the TLS files — as every command takes them (`dtrun`,
// `dtrun rdzv-server`, `dtrun kill/status --endpoint`): the same flags, read and checked by one
// function at start, so a mistake is a one-line error before anything connects.
#pragma once

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "rendezvous/rendezvous_options.h"

namespace dtrun {

// The flags as given; no file is read while parsing.
struct CredentialFlags {
  std::string token;       // --rdzv-token or $DTRUN_RDZV_TOKEN
  std::string token_file;  // --rdzv-token-file: its first line is the token
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
};

void AddCredentialFlags(CLI::App& app, CredentialFlags& flags);

struct Credentials {
  std::string token;
  rdzv::TlsCredentials tls;  // empty: plaintext
};

// Reads the files the flags name. TLS is all or nothing (mutual: the service and every node show
// a certificate signed by the CA and check the other's): a partial set, an unreadable file or one
// that is not PEM of the right kind, a key of another certificate or a certificate the CA did not
// sign is InvalidArgument naming the flag, the file and the fix.
absl::StatusOr<Credentials> LoadCredentials(const CredentialFlags& flags);

}  // namespace dtrun

#include "launcher/credentials.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/env_names.h"
#include "base/status_macros.h"
#include "base/untrusted_file.h"
#include "rendezvous/grpc_module.h"

namespace dtrun {
namespace {

constexpr size_t kMaxTokenFile = 64 * 1024;
constexpr size_t kMaxPemFile = 1 << 20;

absl::StatusOr<std::string> ReadFlagFile(const char* flag, const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::string> data = ReadUntrustedFile(path, max_bytes);
  if (!data.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", data.status().message(), "; give a readable file"));
  }
  return data;
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path, absl::string_view kind) {
  DT_ASSIGN_OR_RETURN(std::string pem, ReadFlagFile(flag, path, kMaxPemFile));
  // "-----BEGIN CERTIFICATE-----", "-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----"...
  const size_t begin = pem.find("-----BEGIN ");
  const size_t kind_at = begin == std::string::npos ? begin : pem.find(absl::StrCat(kind, "-----"), begin);
  if (kind_at == std::string::npos || pem.find('\n', begin) < kind_at) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " is not a PEM ", absl::AsciiStrToLower(kind),
                                                   " (no -----BEGIN ...", kind, "----- line); give the PEM file"));
  }
  return pem;
}

}  // namespace

void AddCredentialFlags(CLI::App& app, CredentialFlags& f) {
  app.add_option("--rdzv-token", f.token, "Secret every node presents to the rendezvous (prefer the file or $" +
                                              std::string(env::kRdzvToken) + ")")
      ->envname(env::kRdzvToken);
  app.add_option("--rdzv-token-file", f.token_file, "Read the rendezvous token from this file (its first line)");
  app.add_option("--rdzv-tls-cert", f.tls_cert, "TLS: PEM certificate of this side, signed by --rdzv-tls-ca");
  app.add_option("--rdzv-tls-key", f.tls_key, "TLS: PEM private key of --rdzv-tls-cert");
  app.add_option("--rdzv-tls-ca", f.tls_ca, "TLS: PEM CA that signed the service's and every node's certificate");
}

absl::StatusOr<Credentials> LoadCredentials(const CredentialFlags& f) {
  Credentials c;
  c.token = f.token;
  if (!f.token_file.empty()) {
    DT_ASSIGN_OR_RETURN(std::string text, ReadFlagFile("--rdzv-token-file", f.token_file, kMaxTokenFile));
    c.token = text.substr(0, text.find('\n'));
    if (!c.token.empty() && c.token.back() == '\r') c.token.pop_back();
    if (c.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--rdzv-token-file ", f.token_file, " is empty; write the token on its first line"));
    }
  }
  std::vector<std::string> missing;
  if (f.tls_cert.empty()) missing.push_back("--rdzv-tls-cert");
  if (f.tls_key.empty()) missing.push_back("--rdzv-tls-key");
  if (f.tls_ca.empty()) missing.push_back("--rdzv-tls-ca");
  if (missing.size() == 3) return c;  // plaintext
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS needs --rdzv-tls-cert, --rdzv-tls-key and --rdzv-tls-ca together (missing ", absl::StrJoin(missing, ", "),
        "): the service and every node show a certificate signed by the CA and check the other's"));
  }
  DT_ASSIGN_OR_RETURN(std::string cert, ReadPem("--rdzv-tls-cert", f.tls_cert, "CERTIFICATE"));
  DT_ASSIGN_OR_RETURN(std::string key, ReadPem("--rdzv-tls-key", f.tls_key, "PRIVATE KEY"));
  DT_ASSIGN_OR_RETURN(std::string ca, ReadPem("--rdzv-tls-ca", f.tls_ca, "CERTIFICATE"));
  c.tls = rdzv::TlsCredentials{std::move(cert), std::move(key), std::move(ca)};
  // The module has OpenSSL (the launcher does not link it): key and certificate belong together
  // and the certificate chains to the CA.
  DT_ASSIGN_OR_RETURN(const rdzv::GrpcModuleApi* grpc, rdzv::LoadGrpcModule());
  DT_RETURN_IF_ERROR(grpc->check_tls(c.tls));
  return c;
}

}  // namespace dtrun

#include "rendezvous/tls_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtrun::rdzv {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtx = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
void FreeCertStack(STACK_OF(X509)* s) { sk_X509_pop_free(s, X509_free); }
using CertStack = std::unique_ptr<STACK_OF(X509), Deleter<STACK_OF(X509), FreeCertStack>>;

Bio Read(const std::string& pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

std::string OpenSslReason() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown reason";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// Every certificate in a PEM bundle, in order.
CertStack ReadCerts(const std::string& pem) {
  CertStack certs(sk_X509_new_null());
  Bio bio = Read(pem);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) sk_X509_push(certs.get(), c);
  ERR_clear_error();  // the read that ended the loop
  return certs;
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

}  // namespace

absl::Status CheckTlsCredentials(const TlsCredentials& tls) {
  if (!tls.enabled()) return absl::OkStatus();
  ERR_clear_error();
  CertStack chain = ReadCerts(tls.cert_pem);
  if (sk_X509_num(chain.get()) == 0) {
    return Bad("--rdzv-tls-cert holds no certificate OpenSSL can read; give a PEM certificate");
  }
  X509* leaf = sk_X509_value(chain.get(), 0);
  Bio key_bio = Read(tls.key_pem);
  KeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key) {
    return Bad(absl::StrCat("--rdzv-tls-key is not a private key OpenSSL can read (", OpenSslReason(),
                            "); give an unencrypted PEM key"));
  }
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return Bad("--rdzv-tls-key does not belong to --rdzv-tls-cert; give the key the certificate was made for");
  }
  CertStack cas = ReadCerts(tls.ca_pem);
  if (sk_X509_num(cas.get()) == 0) return Bad("--rdzv-tls-ca holds no certificate OpenSSL can read; give the CA's PEM");
  Store store(X509_STORE_new());
  for (int i = 0; i < sk_X509_num(cas.get()); ++i) X509_STORE_add_cert(store.get(), sk_X509_value(cas.get(), i));
  StoreCtx ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf, chain.get());  // the rest of the chain as intermediates
  if (X509_verify_cert(ctx.get()) != 1) {
    const char* reason = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
    ERR_clear_error();
    return Bad(absl::StrCat("--rdzv-tls-cert does not verify against --rdzv-tls-ca (", reason,
                            "); every certificate must be signed by the CA all nodes are given"));
  }
  return absl::OkStatus();
}

}  // namespace dtrun::rdzv

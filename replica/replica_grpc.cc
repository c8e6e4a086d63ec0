#include "replica/replica_grpc.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/impl/rpc_service_method.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/method_handler.h>
#include <grpcpp/support/sync_stream.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/endpoint.h"
#include "base/status_macros.h"
#include "base/tcp_port.h"
#include "proto/rendezvous.grpc.pb.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/wire.h"
#include "replica/chunk_wire.h"

namespace dtrun::replica {
namespace {

using Clock = std::chrono::system_clock;  // gRPC's deadlines take the system clock
namespace v1 = rdzv::v1;

void ToWire(const snapshot::SlotHeader& h, v1::ReplicaHeader* out) {
  out->set_job(h.job);
  out->set_rank(h.rank);
  out->set_world_size(h.world_size);
  out->set_step(h.step);
  out->set_attempt(h.attempt);
  out->set_payload_bytes(h.payload_bytes);
  out->set_payload_hash(h.payload_hash);
  out->set_unix_ms(h.unix_ms);
}

snapshot::SlotHeader FromWire(const v1::ReplicaHeader& h) {
  return snapshot::SlotHeader{h.job(), h.rank(), h.world_size(), h.step(), h.attempt(),
                              h.payload_bytes(), h.payload_hash(), h.unix_ms()};
}

// Mutual TLS between buddies with the job's CA (--rdzv-tls-*): each side must present a
// certificate that chains to it. The peer's host name is not checked: a node's certificate need
// not name the address it serves copies on (only the rendezvous host's must name the endpoint),
// and whom the CA signed is a member of the job, which is what the token also says.
std::shared_ptr<grpc::experimental::StaticDataCertificateProvider> CertificatesOf(const rdzv::TlsCredentials& tls) {
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
      tls.ca_pem, std::vector<grpc::experimental::IdentityKeyCertPair>{{tls.key_pem, tls.cert_pem}});
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const rdzv::TlsCredentials& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(CertificatesOf(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const rdzv::TlsCredentials& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(CertificatesOf(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);  // the chain, against the job's CA
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  return grpc::experimental::TlsCredentials(options);
}

// The Replica service's methods (proto/rendezvous.proto), registered by hand below so that their
// chunks are OutgoingChunk and IncomingChunk (replica/chunk_wire.h) rather than the generated
// message, whose data field would copy each chunk twice more. The stubs are built the way gRPC's
// generated code builds them (the same grpcpp headers it includes).
const std::string& PushMethod() {
  static const std::string name = absl::StrCat("/", v1::Replica::service_full_name(), "/Push");
  return name;
}
const std::string& FetchMethod() {
  static const std::string name = absl::StrCat("/", v1::Replica::service_full_name(), "/Fetch");
  return name;
}

// Hands `payload` to `write` in chunks of kChunkBytes (one, empty, for an empty payload), `head`
// with the first only; stops when `write` returns false. Returns whether every chunk went.
template <typename Write>
bool WriteInChunks(v1::ReplicaChunk head, const SharedBytes& payload, Write write) {
  OutgoingChunk chunk{&head, {}, payload.owner};
  size_t offset = 0;
  do {
    if (offset > 0) head.Clear();
    chunk.data = payload.bytes.substr(offset, kChunkBytes);
    offset += chunk.data.size();
    if (!write(chunk)) return false;
  } while (offset < payload.bytes.size());
  return true;
}

// Writes `copy` as chunks, the header with the first, each read by gRPC from the copy itself.
bool WriteCopy(const CopyPtr& copy, grpc::ServerWriter<OutgoingChunk>* writer) {
  v1::ReplicaChunk head;
  ToWire(copy->header, head.mutable_header());
  return WriteInChunks(std::move(head), {copy->payload, copy},
                       [writer](const OutgoingChunk& chunk) { return writer->Write(chunk); });
}

class Service final : public grpc::Service {
 public:
  Service(rdzv::ClientOptions job, std::shared_ptr<ReplicaKeeper> keeper)
      : job_(std::move(job)), keeper_(std::move(keeper)) {
    using grpc::internal::RpcMethod;
    AddMethod(new grpc::internal::RpcServiceMethod(
        PushMethod().c_str(), RpcMethod::CLIENT_STREAMING,
        new grpc::internal::ClientStreamingHandler<Service, IncomingChunk, v1::PushResponse>(
            [](Service* s, grpc::ServerContext* ctx, grpc::ServerReader<IncomingChunk>* reader,
               v1::PushResponse* response) { return s->Push(ctx, reader, response); },
            this)));
    AddMethod(new grpc::internal::RpcServiceMethod(
        FetchMethod().c_str(), RpcMethod::SERVER_STREAMING,
        new grpc::internal::ServerStreamingHandler<Service, v1::FetchRequest, OutgoingChunk>(
            [](Service* s, grpc::ServerContext* ctx, const v1::FetchRequest* request,
               grpc::ServerWriter<OutgoingChunk>* writer) { return s->Fetch(ctx, request, writer); },
            this)));
  }

  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<IncomingChunk>* reader, v1::PushResponse* response) {
    IncomingChunk chunk;
    if (!reader->Read(&chunk)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "an empty snapshot copy");
    if (absl::Status st = rdzv::CheckJobCredentials(chunk.head().auth(), job_.run_id, job_.token); !st.ok()) {
      return rdzv::ToGrpc(st);
    }
    if (!chunk.head().has_header()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a snapshot copy without its header");
    }
    CopyAssembler copy(keeper_->job(), keeper_->max_payload_bytes());
    if (absl::Status st = copy.Begin(FromWire(chunk.head().header()), keeper_->SpareBuffer()); !st.ok()) {
      return rdzv::ToGrpc(st);
    }
    auto add = [&copy](absl::string_view piece) { return copy.Add(piece); };
    do {
      if (absl::Status st = chunk.ForEachDataPiece(add); !st.ok()) return rdzv::ToGrpc(st);
    } while (reader->Read(&chunk));
    absl::StatusOr<Copy> done = copy.Finish();
    if (!done.ok()) return rdzv::ToGrpc(done.status());
    response->set_kept_step(keeper_->Keep(std::move(*done)));
    return grpc::Status::OK;
  }

  grpc::Status Fetch(grpc::ServerContext*, const v1::FetchRequest* request, grpc::ServerWriter<OutgoingChunk>* writer) {
    if (absl::Status st = rdzv::CheckJobCredentials(request->auth(), job_.run_id, job_.token); !st.ok()) {
      return rdzv::ToGrpc(st);
    }
    for (const CopyPtr& copy : keeper_->Copies(request->rank(), request->world_size())) {
      if (!WriteCopy(copy, writer)) return grpc::Status(grpc::StatusCode::CANCELLED, "the fetching node went away");
    }
    return grpc::Status::OK;
  }

 private:
  const rdzv::ClientOptions job_;
  std::shared_ptr<ReplicaKeeper> keeper_;
};

class Server final : public ReplicaServer {
 public:
  Server(std::shared_ptr<grpc::Service> service, std::unique_ptr<grpc::Server> server, int port)
      : service_(std::move(service)), server_(std::move(server)), port_(port) {}
  ~Server() override { server_->Shutdown(Clock::now() + std::chrono::seconds(1)); }
  int port() const override { return port_; }

 private:
  std::shared_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_;
};

class Channel final : public BuddyChannel {
 public:
  Channel(const std::string& endpoint, const rdzv::ClientOptions& job, uint64_t job_hash, uint64_t max_payload_bytes)
      : endpoint_(endpoint), job_hash_(job_hash), max_payload_bytes_(max_payload_bytes) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(2 * kChunkBytes + 4096);
    channel_ = grpc::CreateCustomChannel(endpoint, ChannelCredentialsFor(job.tls), args);
    push_ = std::make_unique<grpc::internal::RpcMethod>(PushMethod().c_str(),
                                                        grpc::internal::RpcMethod::CLIENT_STREAMING, channel_);
    fetch_ = std::make_unique<grpc::internal::RpcMethod>(FetchMethod().c_str(),
                                                         grpc::internal::RpcMethod::SERVER_STREAMING, channel_);
    auth_.set_run_id(job.run_id);
    auth_.set_token(job.token);
    auth_.set_protocol_version(rdzv::kProtocolVersion);
  }

  absl::StatusOr<int64_t> Push(const snapshot::SlotHeader& header, const SharedBytes& payload,
                               const std::function<bool(double)>& pace) override {
    grpc::ClientContext ctx;
    // Paced sending takes long by design; a buddy that stops reading must still end it.
    ctx.set_deadline(Clock::now() + std::chrono::seconds(60 + payload.bytes.size() / (1 << 20)));
    if (!Begin(&ctx)) return Cancelled();
    v1::PushResponse response;
    std::unique_ptr<grpc::ClientWriter<OutgoingChunk>> writer(
        grpc::internal::ClientWriterFactory<OutgoingChunk>::Create(channel_.get(), *push_, &ctx, &response));
    v1::ReplicaChunk head;
    *head.mutable_auth() = auth_;
    ToWire(header, head.mutable_header());
    const bool sent = WriteInChunks(std::move(head), payload, [&](const OutgoingChunk& chunk) {
      const Clock::time_point start = Clock::now();
      if (!writer->Write(chunk)) return false;
      if (pace(std::chrono::duration<double>(Clock::now() - start).count())) return true;
      ctx.TryCancel();
      return false;
    });
    if (sent) writer->WritesDone();
    grpc::Status st = writer->Finish();
    End(&ctx);
    if (!st.ok()) return Named(rdzv::FromGrpc(st));
    return response.kept_step();
  }

  absl::StatusOr<std::vector<Copy>> Fetch(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout) override {
    grpc::ClientContext ctx;
    ctx.set_deadline(Clock::now() + timeout);
    if (!Begin(&ctx)) return Cancelled();
    v1::FetchRequest request;
    *request.mutable_auth() = auth_;
    request.set_rank(rank);
    request.set_world_size(world_size);
    std::unique_ptr<grpc::ClientReader<IncomingChunk>> reader(
        grpc::internal::ClientReaderFactory<IncomingChunk>::Create(channel_.get(), *fetch_, &ctx, request));
    std::vector<Copy> copies;
    CopyAssembler copy(job_hash_, max_payload_bytes_);
    absl::Status bad;
    auto finish = [&] {
      DT_ASSIGN_OR_RETURN(Copy done, copy.Finish());
      if (done.header.rank != rank || done.header.world_size != world_size) {
        return absl::DataLossError(
            absl::StrCat("the buddy sent a copy of rank ", done.header.rank, " for rank ", rank));
      }
      copies.push_back(std::move(done));
      return absl::OkStatus();
    };
    IncomingChunk chunk;
    auto add = [&copy](absl::string_view piece) { return copy.Add(piece); };
    while (bad.ok() && reader->Read(&chunk)) {
      if (chunk.head().has_header()) {
        if (copy.started()) bad = finish();
        if (bad.ok() && copies.size() >= ReplicaKeeper::kCopiesPerRank) bad = absl::OutOfRangeError("the buddy sent more copies than it keeps");
        if (bad.ok()) bad = copy.Begin(FromWire(chunk.head().header()));
      }
      if (bad.ok()) bad = chunk.ForEachDataPiece(add);
    }
    if (!bad.ok()) ctx.TryCancel();
    grpc::Status st = reader->Finish();
    End(&ctx);
    if (!bad.ok()) return Named(bad);
    if (!st.ok()) return Named(rdzv::FromGrpc(st));
    if (copy.started()) {
      if (absl::Status last = finish(); !last.ok()) return Named(last);
    }
    return copies;
  }

  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (in_flight_) in_flight_->TryCancel();
  }

 private:
  bool Begin(grpc::ClientContext* ctx) {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return false;
    in_flight_ = ctx;
    return true;
  }
  void End(grpc::ClientContext*) {
    absl::MutexLock lock(&mu_);
    in_flight_ = nullptr;
  }
  absl::Status Cancelled() const { return absl::CancelledError("shutting down"); }
  absl::Status Named(const absl::Status& st) const {
    return absl::Status(st.code(), absl::StrCat("buddy ", endpoint_, ": ", st.message()));
  }

  const std::string endpoint_;
  const uint64_t job_hash_;
  const uint64_t max_payload_bytes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::internal::RpcMethod> push_;
  std::unique_ptr<grpc::internal::RpcMethod> fetch_;
  v1::Credentials auth_;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* in_flight_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace

std::shared_ptr<grpc::Service> NewReplicaService(const rdzv::ClientOptions& job,
                                                 std::shared_ptr<ReplicaKeeper> keeper) {
  return std::make_shared<Service>(job, std::move(keeper));
}

absl::StatusOr<std::unique_ptr<ReplicaServer>> StartReplicaServer(const std::string& host, int port,
                                                                 const rdzv::ClientOptions& job,
                                                                 std::shared_ptr<ReplicaKeeper> keeper) {
  rdzv::RouteGrpcLogs();
  const std::string addr = FormatEndpoint(host, port);
  // Asked first: gRPC would log a failed bind as an error, and the caller has a free port to fall back on.
  if (port != 0 && TcpPortTaken(host, port)) return absl::UnavailableError(absl::StrCat(addr, " is in use"));
  std::shared_ptr<grpc::Service> service = NewReplicaService(job, std::move(keeper));
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(2 * kChunkBytes + 4096);
  int selected = 0;
  builder.AddListeningPort(addr, ServerCredentialsFor(job.tls), &selected);
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || selected == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve buddy copies on ", addr, " (address in use or not on this host)"));
  }
  return std::unique_ptr<ReplicaServer>(new Server(std::move(service), std::move(server), selected));
}

std::unique_ptr<BuddyChannel> ConnectBuddy(const std::string& host, int port, const rdzv::ClientOptions& job,
                                           uint64_t job_hash, uint64_t max_payload_bytes) {
  rdzv::RouteGrpcLogs();
  return std::make_unique<Channel>(FormatEndpoint(host, port), job, job_hash, max_payload_bytes);
}

}  // namespace dtrun::replica

#include <sys/eventfd.h>
#include <unistd.h>

#include "rendezvous/round_source.h"
#include "base/status_macros.h"

namespace dtrun::rdzv {
namespace {

RendezvousOptions LocalOptions(int max_restarts) {
  RendezvousOptions o;
  o.max_restarts = max_restarts;
  // No other node and no network: nothing can time out.
  o.join_timeout = o.keep_alive_interval = std::chrono::hours(24 * 365);
  return o;
}

}  // namespace

LocalRoundSource::LocalRoundSource(int max_restarts, int nproc, const std::string& store_addr,
                                   int store_port)
    : state_(LocalOptions(max_restarts), std::chrono::steady_clock::now()),
      event_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  node_id_ = state_.Join(NodeInfo{"local", nproc, store_addr, store_port, 0, "", 0}, std::chrono::steady_clock::now()).value();
  Post();
}

LocalRoundSource::~LocalRoundSource() { ::close(event_fd_); }

void LocalRoundSource::Post() {
  uint64_t one = 1;
  ssize_t ignored = ::write(event_fd_, &one, sizeof(one));
  (void)ignored;
}

absl::StatusOr<std::optional<NodeView>> LocalRoundSource::Latest() {
  uint64_t count;
  ssize_t ignored = ::read(event_fd_, &count, sizeof(count));
  (void)ignored;
  DT_ASSIGN_OR_RETURN(NodeView view, state_.View(node_id_));
  return std::optional<NodeView>(view);
}

void LocalRoundSource::ReportSuccess(int64_t round) {
  state_.ReportSuccess(node_id_, round, std::chrono::steady_clock::now()).IgnoreError();
  Post();
}

void LocalRoundSource::ReportFailure(int64_t round, const std::vector<FailureInfo>& failures) {
  state_.ReportFailure(node_id_, round, failures, std::chrono::steady_clock::now()).IgnoreError();
  Post();
}

void LocalRoundSource::PublishStatus(status::NodeStatus node) {
  state_.SetProgress(node_id_, std::move(node)).IgnoreError();  // our own rows: they fit
}

std::optional<status::StragglerStatus> LocalRoundSource::Straggler() {
  std::optional<status::StragglerStatus> s = state_.straggler();
  if (s) s->host.clear();  // one node: the rank says it all
  return s;
}

}  // namespace dtrun::rdzv

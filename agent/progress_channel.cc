#include "agent/progress_channel.h"

#include <string.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

// Datagrams read per wake-up: a flooding worker cannot starve the rest of the loop.
constexpr int kReportsPerWake = 256;

}  // namespace

ProgressChannel::ProgressChannel(EventLoop& loop, const AgentOptions& options, OnReport on_report)
    : loop_(loop), options_(options), on_report_(std::move(on_report)) {}

ProgressChannel::~ProgressChannel() {
  for (const progress::ProgressSocket& s : sockets_) loop_.Unwatch(s.fd());
}

void ProgressChannel::Open() {
  for (int lr = 0; lr < options_.nproc_per_node && !options_.progress_dir.empty(); ++lr) {
    absl::StatusOr<progress::ProgressSocket> s = progress::ProgressSocket::Bind(ProgressSocketPath(options_, lr));
    if (!s.ok() || !loop_.Watch(s->fd(), EPOLLIN, [this, lr](uint32_t) { OnReports(lr); })) {
      spdlog::warn("{}; progress reports and hang detection are off",
                   s.ok() ? absl::StrCat("cannot watch a progress socket: ", strerror(errno)) : std::string(s.status().message()));
      for (const progress::ProgressSocket& bound : sockets_) loop_.Unwatch(bound.fd());
      sockets_.clear();
      return;
    }
    sockets_.push_back(std::move(*s));
  }
}

void ProgressChannel::OnReports(int socket_rank) {
  const Clock::time_point now = options_.now();
  sockets_[socket_rank].Drain(kReportsPerWake, [&](pid_t pid, absl::string_view text) {
    const int lr = group_ ? group_->LocalRankOf(pid) : -1;
    if (lr != socket_rank) {
      if (unknown_senders_++ == 0) {
        spdlog::warn("a progress report for local rank {} came from pid {}, which is not that worker of the "
                     "running round (or in its process group); such reports are ignored", socket_rank, pid);
      }
      return;
    }
    absl::StatusOr<progress::Report> report = progress::ParseReport(text);
    if (!report.ok()) {
      if (warned_ranks_.insert(lr).second) {
        spdlog::warn("local rank {} sent a malformed progress report ({}); ignored (the protocol is in "
                     "docs/DESIGN.md, \"Progress reports\")", lr, std::string(report.status().message()));
      }
      return;
    }
    board_->Apply(lr, *report, now);
    on_report_(lr, *report);
  });
}

void ProgressChannel::ReadPending() {
  for (int lr = 0; lr < static_cast<int>(sockets_.size()); ++lr) OnReports(lr);
}

void ProgressChannel::OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& /*round*/) {
  group_ = &group;
  board_ = std::make_unique<progress::ProgressBoard>(options_.nproc_per_node);
}

void ProgressChannel::OnGroupExited(WorkerGroup& /*group*/) { group_ = nullptr; }

}  // namespace dtrun

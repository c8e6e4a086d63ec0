#include "agent/replicator.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/endpoint.h"
#include "base/format_bytes.h"
#include "base/process_table.h"
#include "base/status_macros.h"
#include "replica/replica_schedule.h"
#include "snapshot/peer_restores.h"
#include "snapshot/snapshot_region.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

struct HeldSnapshot {
  int slot;
  snapshot::SlotHeader header;
};

// The complete snapshots of `rank` in a job of `world_size` in the region behind `fd`, newest first.
std::vector<HeldSnapshot> SnapshotsOf(int fd, uint64_t job, int64_t rank, int64_t world_size) {
  std::vector<HeldSnapshot> out;
  if (fd < 0) return out;
  std::vector<absl::StatusOr<snapshot::SlotHeader>> headers = snapshot::ReadHeaders(fd);
  for (int s = 0; s < static_cast<int>(headers.size()); ++s) {
    const absl::StatusOr<snapshot::SlotHeader>& h = headers[s];
    if (h.ok() && h->job == job && h->rank == rank && h->world_size == world_size) out.push_back({s, *h});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.header.step > b.header.step; });
  return out;
}

std::unique_ptr<snapshot::MappedRegion> MapOrNull(int fd) {
  absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(fd);
  if (!region.ok()) return nullptr;
  return std::make_unique<snapshot::MappedRegion>(std::move(*region));
}

// Copies `payload` into a slot of `region` chosen as a writer would choose it, and completes it
// only if the copy matches `header`'s checksum.
absl::Status Place(snapshot::MappedRegion& region, const snapshot::SlotHeader& header, const char* payload) {
  if (header.payload_bytes > region.layout().PayloadCapacity()) {
    return absl::ResourceExhaustedError(absl::StrCat("a snapshot of ", FormatBytes(header.payload_bytes),
                                                     " does not fit this node's --snapshot-memory"));
  }
  return snapshot::PlaceSnapshot(region, header, [&](char* into) {
    std::memcpy(into, payload, header.payload_bytes);
    return absl::OkStatus();
  });
}

}  // namespace

Replicator::Replicator(BuddyReplication replication, const SnapshotStore& store, uint64_t job)
    : r_(std::move(replication)),
      store_(store),
      job_(job),
      event_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      pacer_(r_.duty) {
  pinned_.assign(store_.nproc(), -1);
  reported_.assign(store_.nproc(), -1);
  to_pin_.assign(store_.nproc(), -1);
  pushed_.assign(store_.nproc(), -1);
  pushing_.assign(store_.nproc(), -1);
  kept_.assign(store_.nproc(), -1);
  failed_step_.assign(store_.nproc(), -1);
  // Mapped once for the agent's life: a mapping made per pin or push cost page-table work for
  // every page of every copy.
  for (int lr = 0; lr < store_.nproc(); ++lr) {
    worker_maps_.push_back(MapOrNull(store_.fd(lr)));
    replica_maps_.push_back(MapOrNull(store_.replica_fd(lr)));
  }
  // spdlog makes its registry at the first use: here, not in two of these threads at once.
  spdlog::default_logger_raw();
  pinner_ = std::thread([this] { PinLoop(); });
  pusher_ = std::thread([this] { PushLoop(); });
}

Replicator::~Replicator() {
  {
    CheckedMutexLock lock(&mu_);
    stopping_ = true;
    if (channel_) channel_->Cancel();
  }
  pinner_.join();
  pusher_.join();
  if (fetcher_.joinable()) fetcher_.join();
}

void Replicator::Drain() {
  uint64_t n;
  while (::read(event_fd_.get(), &n, sizeof(n)) == sizeof(n)) {
  }
}

void Replicator::OnRestored(int local_rank, int64_t step) {
  CheckedMutexLock lock(&mu_);
  if (local_rank < 0 || local_rank >= store_.nproc()) return;
  reported_[local_rank] = std::max<int64_t>(step, -1);
}

void Replicator::OnSnapshot(int local_rank, int64_t step) {
  CheckedMutexLock lock(&mu_);
  if (local_rank < 0 || local_rank >= store_.nproc()) return;
  if (replica::CrossesBoundary(step, reported_[local_rank], r_.every)) {
    to_pin_[local_rank] = step;  // a newer crossing replaces one not yet pinned
    dirty_ = true;
  }
  reported_[local_rank] = std::max(reported_[local_rank], step);
}

std::vector<std::string> Replicator::TakeFetchNotes() {
  CheckedMutexLock lock(&mu_);
  return std::exchange(fetch_notes_, {});
}

Replicator::BuddyView Replicator::View() const {
  CheckedMutexLock lock(&mu_);
  BuddyView view;
  view.endpoint = BuddyEndpoint(round_.buddy_host, round_.buddy_port);
  view.kept_steps = kept_;
  return view;
}

bool Replicator::HoldsSnapshot(int local_rank, int64_t rank, int64_t world_size) const {
  for (int fd : {store_.fd(local_rank), store_.replica_fd(local_rank)}) {
    if (fd < 0) continue;
    for (const absl::StatusOr<snapshot::SlotHeader>& h : snapshot::ReadHeaders(fd)) {
      if (h.ok() && snapshot::Restorable(*h, job_, rank, world_size, peers_)) return true;
    }
  }
  return false;
}

void Replicator::CancelFetch() {
  fetch_cancelled_ = true;
  if (!fetch_channel_) return;  // between two sources: the flag ends it
  spdlog::info(
      "replica: a new round names other places for this node's copies while it fetches them from {}; fetching "
      "from those",
      channel_endpoint_of_fetch_);
  fetch_channel_->Cancel();
  if (fetch_channel_ == channel_) channel_.reset();  // cancelled for good: a later round opens another
  fetch_channel_.reset();
}

std::string Replicator::BuddyEndpoint(const std::string& host, int port) {
  return host.empty() ? "" : FormatEndpoint(host, port);
}

std::shared_ptr<replica::BuddyChannel> Replicator::ChannelFor(const Round& round) {
  if (round.buddy_host.empty()) return nullptr;
  const std::string endpoint = BuddyEndpoint(round.buddy_host, round.buddy_port);
  if (!channel_ || channel_endpoint_ != endpoint) {
    channel_ = r_.connect(round.buddy_host, round.buddy_port);
    channel_endpoint_ = endpoint;
  }
  return channel_;
}

Replicator::Round Replicator::RoundOf(const rdzv::Assignment& a) {
  Round round{a.round, a.rank_offset, a.world_size, a.buddy_addr, a.buddy_port, {}};
  for (const rdzv::ReplicaEndpoint& at : a.copies_at) {
    if (!at.addr.empty()) round.sources.push_back(at);
  }
  const rdzv::ReplicaEndpoint buddy{a.buddy_addr, a.buddy_port};
  if (!a.buddy_addr.empty() && std::find(round.sources.begin(), round.sources.end(), buddy) == round.sources.end()) {
    round.sources.push_back(buddy);
  }
  return round;
}

void Replicator::SayBuddy(const rdzv::Assignment& a) const {
  const std::string endpoint = BuddyEndpoint(a.buddy_addr, a.buddy_port);
  if (endpoint.empty() || endpoint == BuddyEndpoint(round_.buddy_host, round_.buddy_port)) return;
  if (r_.failure_domain.empty()) {
    spdlog::debug("replica: this node's snapshots are copied to {}", endpoint);  // the first copy says it
  } else if (a.buddy_failure_domain != r_.failure_domain) {
    spdlog::info("replica: this node's snapshots are copied to {}, in failure domain {}", endpoint,
                 a.buddy_failure_domain.empty() ? "(none said)" : a.buddy_failure_domain);
  } else {
    spdlog::warn(
        "replica: this node's snapshots are copied to {}, in its own failure domain {}: it holds more than half of "
        "the round's nodes, so one fault there may take a node and its copies together",
        endpoint, r_.failure_domain);
  }
}

bool Replicator::ReadyFor(const rdzv::Assignment& a) {
  CheckedMutexLock lock(&mu_);
  if (a.round == fetched_round_) return true;
  if (fetching_) {
    // An earlier round's fetch. A newer round that looks elsewhere ends it now: a node it reads
    // from left the job, and if its host went silent the fetch would wait out gRPC's 20 s connect.
    // Looking at the same places (alive, then) it ends within its timeout.
    if (a.round > round_.round && RoundOf(a).sources != round_.sources) CancelFetch();
    return false;
  }
  SayBuddy(a);
  round_ = RoundOf(a);
  // A new round may have gone back past what was pinned: pins start over from its snapshots.
  pinned_.assign(store_.nproc(), -1);
  reported_.assign(store_.nproc(), -1);
  to_pin_.assign(store_.nproc(), -1);
  pushed_.assign(store_.nproc(), -1);
  kept_.assign(store_.nproc(), -1);
  std::shared_ptr<replica::BuddyChannel> channel = ChannelFor(round_);
  std::vector<int> missing;
  for (int lr = 0; lr < store_.nproc(); ++lr) {
    if (!HoldsSnapshot(lr, a.rank_offset + lr, a.world_size)) missing.push_back(lr);
  }
  // Round 0 is a fresh start everywhere: no node holds anything to fetch.
  if (missing.empty() || round_.sources.empty() || a.round == 0) {
    fetched_round_ = a.round;
    return true;
  }
  fetching_ = true;
  fetch_cancelled_ = false;
  if (fetcher_.joinable()) fetcher_.join();  // finished: fetching_ was false
  fetcher_ = std::thread([this, round = round_, missing, channel] { Fetch(round, missing, channel); });
  return false;
}

std::shared_ptr<replica::BuddyChannel> Replicator::FetchChannel(const Round& round, const rdzv::ReplicaEndpoint& source,
                                                                const std::shared_ptr<replica::BuddyChannel>& buddy) {
  const bool is_buddy = buddy && source.addr == round.buddy_host && source.port == round.buddy_port;
  // Connecting makes no call: a channel is cheap, and the first Fetch is what may wait.
  std::shared_ptr<replica::BuddyChannel> channel = is_buddy ? buddy : r_.connect(source.addr, source.port);
  CheckedMutexLock lock(&mu_);
  if (fetch_cancelled_ || stopping_) return nullptr;
  fetch_channel_ = channel;
  channel_endpoint_of_fetch_ = FormatEndpoint(source.addr, source.port);
  return channel;
}

void Replicator::FetchFrom(const Round& round, const std::string& from, replica::BuddyChannel& channel,
                           std::vector<int>& wanted, std::vector<std::string>& notes,
                           std::vector<std::string>& misses) {
  std::vector<int> still;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const int lr = wanted[i];
    const int64_t rank = round.rank_offset + lr;
    absl::StatusOr<std::vector<replica::Copy>> copies = channel.Fetch(rank, round.world_size, r_.fetch_timeout);
    if (!copies.ok() || copies->empty()) {
      // gRPC's errors name the endpoint already.
      const absl::string_view why = copies.ok() ? "" : copies.status().message();
      absl::StrAppend(&misses[lr], misses[lr].empty() ? "" : "; ",
                      copies.ok()                    ? absl::StrCat(from, " holds none")
                      : absl::StrContains(why, from) ? why
                                                     : absl::StrCat(from, ": ", why));
      still.push_back(lr);
      // Unreachable or cancelled: the other ranks would wait on it too; they go to the next source.
      if (!copies.ok()) {
        for (size_t j = i + 1; j < wanted.size(); ++j) {
          absl::StrAppend(&misses[wanted[j]], misses[wanted[j]].empty() ? "" : "; ", from, ": not asked");
          still.push_back(wanted[j]);
        }
        break;
      }
      continue;
    }
    CheckedMutexLock regions(&regions_mu_);
    snapshot::MappedRegion* region = replica_maps_[lr].get();
    if (region == nullptr) {
      notes.push_back(absl::StrCat("rank ", rank, ": its replica region could not be mapped"));
      continue;
    }
    std::vector<std::string> steps;
    uint64_t bytes = 0;
    for (auto it = copies->rbegin(); it != copies->rend(); ++it) {  // oldest first: the newest stays
      if (absl::Status st = Place(*region, it->header, it->payload.data()); !st.ok()) {
        notes.push_back(absl::StrCat("rank ", rank, ": the buddy's copy of step ", it->header.step, ": ", st.message()));
        continue;
      }
      steps.push_back(absl::StrCat(it->header.step));
      bytes += it->payload.size();
    }
    if (!steps.empty()) {
      std::reverse(steps.begin(), steps.end());
      notes.push_back(absl::StrCat("rank ", rank, ": fetched the buddy copies of step ", absl::StrJoin(steps, ", "), " (",
                                   FormatBytes(bytes), ") from ", from));
    }
  }
  wanted = std::move(still);
}

void Replicator::Fetch(Round round, std::vector<int> local_ranks, std::shared_ptr<replica::BuddyChannel> buddy) {
  std::vector<std::string> notes;
  std::vector<std::string> misses(static_cast<size_t>(store_.nproc()));
  for (const rdzv::ReplicaEndpoint& source : round.sources) {
    if (local_ranks.empty()) break;
    std::shared_ptr<replica::BuddyChannel> channel = FetchChannel(round, source, buddy);
    if (!channel) break;  // cancelled
    FetchFrom(round, FormatEndpoint(source.addr, source.port), *channel, local_ranks, notes, misses);
  }
  for (int lr : local_ranks) {
    notes.push_back(absl::StrCat("rank ", round.rank_offset + lr, ": no buddy copy (",
                                 misses[lr].empty() ? "the fetch was cancelled" : misses[lr], ")"));
  }
  CheckedMutexLock lock(&mu_);
  fetching_ = false;
  fetch_channel_.reset();
  fetched_round_ = std::max(fetched_round_, round.round);
  fetch_notes_ = std::move(notes);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
}

bool Replicator::PauseFor(std::chrono::duration<double> pause) {
  CheckedMutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  if (pause.count() > 0) mu_.AwaitWithTimeout(stopping, pause);
  return !stopping_;
}

std::optional<std::pair<Replicator::Round, std::shared_ptr<replica::BuddyChannel>>> Replicator::AwaitWork(bool* due) {
  CheckedMutexLock lock(&mu_);
  auto woken = [this, due]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || *due; };
  mu_.Await(woken);
  if (stopping_) return std::nullopt;
  *due = false;
  return std::make_pair(round_, channel_);
}

void Replicator::PinLoop() {
  while (auto work = AwaitWork(&dirty_)) {
    const Round& round = work->first;
    if (round.round < 0 || round.buddy_host.empty()) continue;
    bool pinned = false;
    for (int lr = 0; lr < store_.nproc(); ++lr) pinned |= Pin(lr, round);
    if (pinned) {
      CheckedMutexLock lock(&mu_);
      push_due_ = true;
    }
  }
}

void Replicator::PushLoop() {
  // A low priority: on a machine whose cores the training fills, copies take a small share
  // (replication lags) instead of an equal one. Not the lowest: at nice 19 a copy can starve for
  // the whole run, and a node lost then has nothing on its buddy.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  std::chrono::milliseconds backoff = r_.first_retry;
  while (auto work = AwaitWork(&push_due_)) {
    const auto& [round, channel] = *work;
    if (round.round < 0 || !channel) continue;
    bool failed = false;
    for (int lr = 0; lr < store_.nproc(); ++lr) failed |= !Push(lr, round, channel.get());
    backoff = failed ? RetryLater(backoff) : r_.first_retry;
  }
}

std::chrono::milliseconds Replicator::RetryLater(std::chrono::milliseconds backoff) {
  CheckedMutexLock lock(&mu_);
  // A newer pin ends the wait early: it is what should travel now.
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || push_due_; };
  mu_.AwaitWithTimeout(woken, backoff);
  push_due_ = true;
  return std::min(backoff * 2, kLastRetry);
}

bool Replicator::Pin(int local_rank, const Round& round) {
  const int64_t rank = round.rank_offset + local_rank;
  int64_t step = -1;
  {
    CheckedMutexLock lock(&mu_);
    step = std::exchange(to_pin_[local_rank], -1);
    if (step < 0 || step <= pinned_[local_rank] || stopping_) return false;
  }
  std::vector<HeldSnapshot> mine = SnapshotsOf(store_.fd(local_rank), job_, rank, round.world_size);
  auto it = std::find_if(mine.begin(), mine.end(), [&](const HeldSnapshot& h) {
    return h.header.step == step && h.header.attempt == round.round;
  });
  if (it == mine.end()) {
    // Overwritten before it was copied (two snapshots within one pin). Skipping keeps this node's
    // pins on steps every other node also pins.
    spdlog::debug("rank {}: snapshot of step {} was overwritten before it was pinned for the buddy", rank, step);
    return false;
  }
  const HeldSnapshot held = *it;
  const snapshot::SlotHeader newest = held.header;
  snapshot::MappedRegion* source = worker_maps_[local_rank].get();
  snapshot::MappedRegion* pinned = replica_maps_[local_rank].get();
  if (source == nullptr || pinned == nullptr) return false;
  CheckedMutexLock regions(&regions_mu_);
  std::vector<absl::StatusOr<snapshot::SlotHeader>> headers;
  for (int s = 0; s < snapshot::kSlots; ++s) headers.push_back(pinned->Header(s));
  {
    CheckedMutexLock lock(&mu_);
    // The push lags by two boundaries: keep the copy in flight, skip this one.
    if (snapshot::SlotToWrite(headers, newest.step) == pushing_[local_rank]) return false;
    pinned_[local_rank] = newest.step;
  }
  // A slot the worker rewrote meanwhile fails Place's checksum: the next report brings the newer one.
  if (absl::Status st = Place(*pinned, newest, source->Payload(held.slot)); !st.ok()) {
      spdlog::debug("rank {}: snapshot of step {} not pinned for the buddy: {}", rank, newest.step, std::string(st.message()));
    return false;
  }
  return true;
}

bool Replicator::Push(int local_rank, const Round& round, replica::BuddyChannel* channel) {
  const int64_t rank = round.rank_offset + local_rank;
  // The pause the previous copy earned with its last chunk, less the time since; before the copy
  // to send is chosen, so that a snapshot pinned meanwhile is the one that goes.
  if (!PauseFor(resume_at_ - Clock::now())) return true;
  const snapshot::MappedRegion* pinned = replica_maps_[local_rank].get();
  if (pinned == nullptr) return true;
  int slot = -1;
  snapshot::SlotHeader header;
  {
    CheckedMutexLock regions(&regions_mu_);
    std::vector<HeldSnapshot> held = SnapshotsOf(store_.replica_fd(local_rank), job_, rank, round.world_size);
    if (held.empty()) return true;
    slot = held[0].slot;
    header = held[0].header;
    CheckedMutexLock lock(&mu_);
    if (header.step <= pushed_[local_rank] || stopping_) return true;
    pushed_[local_rank] = header.step;
    pushing_[local_rank] = slot;
  }
  const Clock::time_point start = Clock::now();
  // Each chunk's time less the thread's wait for a CPU (replica/send_pacer.h).
  std::optional<std::chrono::nanoseconds> queued = ThisThreadRunqueueWait();
  auto pace = [this, &queued](double wall_s) {
    const std::optional<std::chrono::nanoseconds> now = ThisThreadRunqueueWait();
    const double queued_s = now && queued ? std::chrono::duration<double>(*now - *queued).count() : 0.0;
    const bool go_on = PauseFor(std::chrono::duration<double>(pacer_.Sent(wall_s, queued_s)));
    queued = ThisThreadRunqueueWait();  // not the pause, nor the wake-up after it
    return go_on;
  };
  absl::StatusOr<int64_t> kept = channel->Push(
      header, {absl::string_view(pinned->Payload(slot), header.payload_bytes), replica_maps_[local_rank]}, pace);
  resume_at_ =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(pacer_.TakeOwed()));
  bool first = false;
  {
    CheckedMutexLock lock(&mu_);
    pushing_[local_rank] = -1;
    first = kept.ok() && !confirmed_.count(rank);
    if (kept.ok()) {
      confirmed_.insert(rank);
      kept_[local_rank] = *kept;
    }
    // Not there: the same copy goes again (after a pause) unless a newer one is pinned first.
    if (!kept.ok() && pushed_[local_rank] == header.step) pushed_[local_rank] = header.step - 1;
  }
  if (first) {
    spdlog::info("rank {}: the buddy {}:{} holds a copy of its snapshot of step {} ({}, sent in {:.1f} s)", rank,
                 round.buddy_host, round.buddy_port, header.step, FormatBytes(header.payload_bytes),
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (!kept.ok() && !absl::IsCancelled(kept.status())) {
    // Said once per copy, not once per retry.
    const auto level = std::exchange(failed_step_[local_rank], header.step) == header.step ? spdlog::level::debug
                                                                                           : spdlog::level::warn;
    spdlog::log(level, "rank {}: the copy of step {} did not reach the buddy: {}; the buddy keeps its older copy",
                rank, header.step, std::string(kept.status().message()));
  }
  return kept.ok() || absl::IsCancelled(kept.status());
}

}  // namespace dtrun

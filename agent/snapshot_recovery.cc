#include "agent/snapshot_recovery.h"

#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "base/guarded_thread.h"
#include "snapshot/snapshot_region.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

SnapshotRecovery::SnapshotRecovery(EventLoop& loop, EventLog& events, const AgentOptions& options)
    : loop_(loop), events_(events), options_(options) {}

SnapshotRecovery::~SnapshotRecovery() {
  if (replicator_) loop_.Unwatch(replicator_->event_fd());
  if (load_done_.valid()) loop_.Unwatch(load_done_.get());
  if (loader_.joinable()) loader_.join();
}

void SnapshotRecovery::Start(std::optional<BuddyReplication> replication) {
  absl::StatusOr<SnapshotStore> store =
      SnapshotStore::Create(options_.nproc_per_node, options_.snapshot_bytes_per_worker, replication.has_value());
  if (!store.ok()) {
    spdlog::warn("{}; training without in-memory snapshots (recovery falls back to disk checkpoints)",
                 std::string(store.status().message()));
    return;
  }
  store_ = std::move(*store);
  if (!options_.snapshot_dir.empty() && store_.enabled()) {
    absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(options_.snapshot_dir);
    if (dir.ok()) {
      dir_ = std::move(*dir);
      absl::StatusOr<UniqueFd> held = dir_->HoldRun(snapshot::JobHash(options_.run_id));
      if (held.ok()) {
        run_lock_ = std::move(*held);
      } else {
        spdlog::warn("{}", std::string(held.status().message()));
      }
    } else {
      spdlog::warn("{}; snapshots are not kept past this run", std::string(dir.status().message()));
    }
  }
  if (!replication || !store_.enabled()) return;
  replicator_ = std::make_unique<Replicator>(std::move(*replication), store_, snapshot::JobHash(options_.run_id));
  // A fetch that ended wakes the loop; the Agent then starts the round it waited for.
  if (!loop_.Watch(replicator_->event_fd(), EPOLLIN, [this](uint32_t) { replicator_->Drain(); })) {
    spdlog::warn("cannot watch the buddy-copy fetch ({}); training without buddy copies", strerror(errno));
    replicator_.reset();
  }
}

void SnapshotRecovery::AddRegionsTo(WorkerGroup::Io& io) const {
  for (int lr = 0; store_.enabled() && lr < options_.nproc_per_node; ++lr) {
    io.snapshot_fds.push_back(store_.fd(lr));
    if (store_.replica_fd(lr) >= 0) io.replica_fds.push_back(store_.replica_fd(lr));
  }
}

bool SnapshotRecovery::AllRanksSnapshotted() const {
  if (!store_.enabled()) return false;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (!store_.Newest(lr)) return false;
  }
  return true;
}

std::chrono::milliseconds SnapshotRecovery::StopGrace(std::chrono::milliseconds shutdown_timeout) const {
  constexpr std::chrono::milliseconds kBase{500};
  if (!AllRanksSnapshotted()) return shutdown_timeout;
  // The reported figure is the worker's word: bounded by the timeout before it is doubled. States
  // that write in under 0.25 s keep the 0.5 s: a GPU state, which no worker keeps on the way out,
  // waits no longer than before.
  const int64_t write_ms = std::min<int64_t>(slowest_write_us_ / 1000, shutdown_timeout.count());
  return std::min(shutdown_timeout, std::max(kBase, 2 * std::chrono::milliseconds(write_ms)));
}

bool SnapshotRecovery::ReadyFor(const rdzv::Assignment& a) {
  ranks_ = {a.rank_offset, a.world_size};
  if (!LoadedFor(a)) return false;
  StartCopies();  // once the load is done: until then the files are being read
  if (!replicator_) return true;
  if (!replicator_->ReadyFor(a)) return false;
  for (const std::string& note : replicator_->TakeFetchNotes()) {
    spdlog::info("{}", note);
    events_.Record("buddy_fetch", a.round, {{"note", note}});
  }
  return true;
}

void SnapshotRecovery::StartCopies() {
  if (!dir_ || options_.snapshot_dir_every.count() == 0 || persister_) return;
  persister_ = std::make_unique<SnapshotPersister>(*dir_, store_, snapshot::JobHash(options_.run_id),
                                                   options_.snapshot_dir_every);
}

bool SnapshotRecovery::LoadedFor(const rdzv::Assignment& a) {
  if (!dir_ || load_ == Load::kDone) return true;
  if (load_ == Load::kRunning) return false;
  load_done_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!load_done_.valid() || !loop_.Watch(load_done_.get(), EPOLLIN, [this](uint32_t) { OnLoaded(); })) {
    spdlog::warn("cannot wait for the snapshots kept in {} ({}); starting without them", dir_->path(), strerror(errno));
    load_ = Load::kDone;
    return true;
  }
  load_ = Load::kRunning;
  // Files can be large and the disk slow: read on a thread, so the loop (keep-alives, signals,
  // the console) runs on.
  load_started_ = options_.now();
  loader_ = std::thread([this, job = snapshot::JobHash(options_.run_id), first = a.rank_offset, world = a.world_size] {
    RunGuarded(
        "loading the kept snapshots", [&] { loaded_ = dir_->Load(store_, job, first, world); },
        [&](const absl::Status& st) { loaded_.problems.push_back(std::string(st.message())); });
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(load_done_.get(), &one, sizeof(one));
  });
  return false;
}

void SnapshotRecovery::OnLoaded() {
  loop_.Unwatch(load_done_.get());
  loader_.join();
  load_done_.Reset();
  load_ = Load::kDone;
  for (const std::string& problem : loaded_.problems) spdlog::warn("{}", problem);
  if (loaded_.ranks == 0) return;
  for (int lr = 0; lr < store_.nproc(); ++lr) {
    const std::optional<snapshot::SlotHeader> newest = store_.Newest(lr);
    loaded_steps_.push_back(newest ? newest->step : -1);
  }
  // A program or model changed since can fail on that state, and would keep it again: say how out.
  const std::string by =
      loaded_.taken_by_world > 0 ? absl::StrCat(" by a world of ", loaded_.taken_by_world, " ranks") : "";
  spdlog::info("loaded {} kept in {}{} ({:.2f} s): the workers start from them (to start afresh instead, remove {}/*.dtsnap)",
               loaded_.Describe(), dir_->path(), by, Seconds(options_.now() - load_started_), dir_->path());
  nlohmann::json fields = {{"dir", dir_->path()}, {"ranks", loaded_.ranks}, {"steps", loaded_.steps}, {"bytes", loaded_.bytes}};
  if (loaded_.taken_by_world > 0) fields["taken_by_world_size"] = loaded_.taken_by_world;
  events_.Record("snapshots_loaded", round_, fields);
  if (loaded_.superseded > 0) {
    spdlog::info(
        "removed {} older file(s) of this world size from {}: those of a world of {} ranks loaded instead were "
        "written after them",
        loaded_.superseded, dir_->path(), loaded_.taken_by_world);
  }
}

std::vector<int64_t> SnapshotRecovery::KeptSteps() const {
  std::vector<int64_t> kept = loaded_steps_;
  kept.resize(static_cast<size_t>(options_.nproc_per_node), -1);
  if (persister_) {
    const std::vector<int64_t> written = persister_->written();
    for (size_t lr = 0; lr < kept.size() && lr < written.size(); ++lr) kept[lr] = std::max(kept[lr], written[lr]);
  }
  return kept;
}

int64_t SnapshotRecovery::StuckAtLoadedStep() const {
  if (loaded_.ranks == 0 || loaded_.steps.empty()) return -1;
  const int64_t loaded = loaded_.steps.back();
  for (int lr = 0; lr < store_.nproc(); ++lr) {
    std::optional<snapshot::SlotHeader> newest = store_.Newest(lr);
    if (newest && newest->step > loaded) return -1;
  }
  return loaded;
}

void SnapshotRecovery::OnJobEnd(JobEnd end) {
  if (!dir_) return;
  if (loader_.joinable()) OnLoaded();  // the job ended while a load ran: its regions are whole again first
  if (persister_) persister_->Stop();  // the writes below replace its files
  // The run's lock goes once its files are kept or removed.
  absl::Cleanup release = [this] { dir_->ReleaseRun(std::move(run_lock_), snapshot::JobHash(options_.run_id)); };
  if (end == JobEnd::kSucceeded) {
    if (ranks_.world_size <= 0) return;  // a spare that ran nothing: nothing of it to remove
    const SnapshotDir::Cleared cleared = dir_->Clear(snapshot::JobHash(options_.run_id), ranks_.first,
                                                     options_.nproc_per_node, ranks_.world_size);
    for (const std::string& problem : cleared.problems) spdlog::warn("{}", problem);
    if (cleared.removed > 0) {
      spdlog::info("the job finished: removed the {} snapshot file(s) kept in {}", cleared.removed, dir_->path());
    }
    return;
  }
  const auto started = options_.now();
  const SnapshotDir::Outcome kept = dir_->Keep(store_, snapshot::JobHash(options_.run_id));
  for (const std::string& problem : kept.problems) spdlog::warn("{}", problem);
  if (kept.ranks > 0) {
    spdlog::warn("kept {} in {} ({:.2f} s): the next run with --snapshot-dir {} starts from them", kept.Describe(),
                 dir_->path(), Seconds(options_.now() - started), dir_->path());
  }
  if (kept.superseded > 0) {
    spdlog::info("removed {} file(s) of another world size from {}: the state kept now is newer", kept.superseded,
                 dir_->path());
  }
  nlohmann::json fields = {{"dir", dir_->path()}, {"ranks", kept.ranks}, {"steps", kept.steps}, {"bytes", kept.bytes}};
  // Also when nothing was kept (every region emptied): the files then still hold the loaded state.
  if (const int64_t stuck = StuckAtLoadedStep(); end == JobEnd::kFailed && stuck >= 0) {
    spdlog::warn("this run failed before any snapshot past step {}, the one it loaded from {}: if the program or its "
                 "model changed since the run that kept it, remove {}/*.dtsnap to start afresh",
                 stuck, dir_->path(), dir_->path());
    fields["failed_at_loaded_step"] = stuck;
  }
  if (kept.ranks > 0 || fields.contains("failed_at_loaded_step")) events_.Record("snapshots_kept", round_, fields);
}

void SnapshotRecovery::OnReport(int local_rank, const progress::Report& report) {
  using Kind = progress::Report::Kind;
  if (report.kind == Kind::kSnapshot) {
    slowest_write_us_ = std::max(slowest_write_us_, report.micros.value_or(0));
    if (replicator_ && report.step) replicator_->OnSnapshot(local_rank, *report.step);
  }
  if (report.kind == Kind::kRestored) {
    if (replicator_) replicator_->OnRestored(local_rank, report.step.value_or(-1));
    events_.Record("state_restored", round_,
                   {{"local_rank", local_rank}, {"source", report.source}, {"step", report.step.value_or(-1)}});
    tracker_.OnRestored(local_rank, report.source, report.step.value_or(-1), options_.now());
    return;
  }
  if (report.kind != Kind::kBeat || !report.step) return;
  if (std::optional<Recovery> done = tracker_.OnStep(local_rank, *report.step, options_.now())) OnRecovered(*done);
}

void SnapshotRecovery::OnRecovered(const Recovery& done) {
  events_.Record("recovered", round_,
                 {{"source", done.source}, {"restored_step", done.restored_step},
                  {"step_before", done.step_before}, {"lost_steps", done.lost_steps()},
                  {"stopped_ms", done.stopped.count()}, {"started_ms", done.started.count()},
                  {"restored_ms", done.restored.count()}, {"stepping_ms", done.stepping.count()}});
  const char* from = done.source == "memory"  ? "the in-memory snapshot"
                     : done.source == "buddy" ? "the buddy node's copy of the in-memory snapshot"
                     : done.source == "peer"  ? "another rank's in-memory snapshot"
                     : done.source == "disk"  ? "the disk checkpoint"
                                              : "the start";
  spdlog::warn("recovered: every local rank stepping again {:.2f} s after the failure (workers stopped {:.2f} s, "
               "started {:.2f} s, state restored {:.2f} s), from {} of step {}; {} step(s) of work lost",
               done.stepping.count() / 1e3, done.stopped.count() / 1e3, done.started.count() / 1e3,
               done.restored.count() / 1e3, from, std::max<int64_t>(done.restored_step, 0), done.lost_steps());
}

void SnapshotRecovery::OnFailure(int64_t step_before) { tracker_.OnFailure(options_.now(), step_before); }

void SnapshotRecovery::OnRoundStarted(WorkerGroup& /*group*/, const rdzv::Assignment& round) {
  RoundStarted(round.round);
}
void SnapshotRecovery::OnGroupExited(WorkerGroup& /*group*/) { GroupExited(); }

void SnapshotRecovery::RoundStarted(int64_t round) {
  round_ = round;
  tracker_.OnStarted(options_.now(), options_.nproc_per_node);
}

void SnapshotRecovery::GroupExited() { tracker_.OnStopped(options_.now()); }

}  // namespace dtrun

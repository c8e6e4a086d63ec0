#include "worker/memory_snapshot.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <system_error>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/alt_signal_stack.h"
#include "base/env_names.h"
#include "base/status_macros.h"
#include "base/uninitialized_allocator.h"
#include "base/unix_time.h"
#include "snapshot/payload_toc.h"
#include "snapshot/peer_restores.h"
#include "worker/snapshot_device_copy.h"

namespace dtrun::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kChunk = 1 << 20;  // copied, then hashed while still in cache

std::optional<int64_t> EnvInt(const char* name) {
  const char* v = std::getenv(name);
  int64_t n = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &n)) return std::nullopt;
  return n;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  return s;
}

snapshot::TensorRecord RecordOf(const StateTensor& st) {
  const torch::Tensor& t = st.tensor;
  snapshot::TensorRecord r;
  r.name = st.name;
  r.dtype = static_cast<int32_t>(t.scalar_type());
  r.item_bytes = static_cast<int32_t>(t.element_size());
  r.sizes = t.sizes().vec();
  // Dense tensors keep their layout (channels-last weights copy as one block); others are
  // written contiguous.
  r.strides = t.is_non_overlapping_and_dense() ? t.strides().vec() : ContiguousStrides(r.sizes);
  r.nbytes = snapshot::SpanBytes(r.sizes, r.strides, r.item_bytes).value_or(0);
  return r;
}

// The storage bytes of a dense CPU tensor, from its first element (strides are non-negative).
bool IsPlainCpu(const torch::Tensor& t, const snapshot::TensorRecord& r) {
  return t.device().is_cpu() && t.is_non_overlapping_and_dense() && t.strides() == r.strides;
}

// `src` null: the bytes are in place already, only hashed. `fingerprint`, when given, hashes the
// same bytes while they are in cache.
void CopyAndHash(const char* src, char* dst, uint64_t n, snapshot::PayloadHasher& hasher,
                 snapshot::PayloadHasher* fingerprint) {
  for (uint64_t at = 0; at < n; at += kChunk) {
    const uint64_t len = std::min(kChunk, n - at);
    if (src != nullptr) std::memcpy(dst + at, src + at, len);
    hasher.Update(dst + at, len);
    if (fingerprint != nullptr) fingerprint->Update(dst + at, len);
  }
}

torch::Tensor ViewOf(char* base, const snapshot::TensorRecord& r) {
  return torch::from_blob(base + r.offset, r.sizes, r.strides,
                          torch::TensorOptions().dtype(static_cast<c10::ScalarType>(r.dtype)));
}

// Without a bool tensor the size of the state: a NaN or an infinity shows in the minimum or the
// maximum, one pass (isfinite().all() over a 1.4 GB state took 3.2 s on the way out, aminmax 0.1 s).
bool AllFinite(const torch::Tensor& v) {
  if (v.numel() == 0) return true;
  try {
    const auto [lo, hi] = torch::aminmax(v);
    return std::isfinite(lo.item<double>()) && std::isfinite(hi.item<double>());
  } catch (const c10::Error&) {  // no aminmax for this dtype in this LibTorch
    return torch::isfinite(v).all().item<bool>();
  }
}

// The name of the first floating tensor in the payload at `base` with a value that is not finite.
std::optional<std::string> FirstNotFinite(char* base, const std::vector<snapshot::TensorRecord>& records) {
  for (const snapshot::TensorRecord& r : records) {
    const torch::Tensor v = ViewOf(base, r);
    if (v.is_floating_point() && !AllFinite(v)) return r.name;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<MemorySnapshots> MemorySnapshots::FromEnvironment(const DistEnv& env) {
  std::optional<int64_t> fd = EnvInt(env::kSnapshotFd);
  if (!fd || *fd < 0) return nullptr;
  absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(static_cast<int>(*fd));
  if (!region.ok()) {
    std::fprintf(stderr, "warning: %s=%lld: %s; training without in-memory snapshots\n", env::kSnapshotFd,
                 static_cast<long long>(*fd), std::string(region.status().message()).c_str());
    return nullptr;
  }
  std::optional<snapshot::MappedRegion> replica;
  if (std::optional<int64_t> replica_fd = EnvInt(env::kSnapshotReplicaFd); replica_fd && *replica_fd >= 0) {
    absl::StatusOr<snapshot::MappedRegion> r = snapshot::MappedRegion::Map(static_cast<int>(*replica_fd));
    if (r.ok()) {
      replica.emplace(std::move(*r));
    } else {
      std::fprintf(stderr, "warning: %s=%lld: %s; restoring without buddy copies\n", env::kSnapshotReplicaFd,
                   static_cast<long long>(*replica_fd), std::string(r.status().message()).c_str());
    }
  }
  const char* run_id = std::getenv(env::kRunId);
  const int forced = static_cast<int>(std::clamp<int64_t>(EnvInt(env::kSnapshotEvery).value_or(0), 0, 1 << 30));
  std::unique_ptr<MemorySnapshots> snapshots(new MemorySnapshots(std::move(*region), std::move(replica), env,
                                                                 snapshot::JobHash(run_id ? run_id : ""), forced));
  const char* copy = std::getenv(env::kSnapshotCopy);
  snapshots->background_ = copy != nullptr && std::string(copy) == "background";
  snapshots->copy_mode_given_ = copy != nullptr;
  const char* on_failure = std::getenv(env::kSnapshotOnFailure);
  snapshots->rescue_off_ = on_failure != nullptr && std::string(on_failure) == "off";
  snapshots->peers_ = snapshot::PeerRestoresAllowed();
  return snapshots;
}

std::vector<snapshot::MappedRegion*> MemorySnapshots::Sources() {
  std::vector<snapshot::MappedRegion*> sources{&region_};
  if (replica_) sources.push_back(&*replica_);
  return sources;
}

snapshot::SlotHeader MemorySnapshots::OwnHeader(int64_t step, uint64_t payload_bytes) const {
  snapshot::SlotHeader h;
  h.job = job_;
  h.rank = env_.rank;
  h.world_size = env_.world_size;
  h.step = step;
  h.attempt = env_.restart_count;
  h.payload_bytes = payload_bytes;
  return h;
}

bool MemorySnapshots::Restorable(const snapshot::SlotHeader& h) const {
  return snapshot::Restorable(h, job_, env_.rank, env_.world_size, peers_);
}

std::vector<int64_t> MemorySnapshots::UsableSteps() {
  std::vector<int64_t> steps;
  for (const Usable& u : UsableSnapshots()) steps.push_back(u.step);
  return steps;
}

std::vector<MemorySnapshots::Usable> MemorySnapshots::UsableSnapshots() {
  Finish();
  std::vector<Usable> usable;
  CheckedMutexLock lock(&mu_);
  for (snapshot::MappedRegion* region : Sources()) {
    for (int s = 0; s < snapshot::kSlots; ++s) {
      absl::StatusOr<snapshot::SlotHeader> h = region->Header(s);
      if (!h.ok()) {
        if (!absl::IsNotFound(h.status())) {
          std::fprintf(stderr, "warning: in-memory snapshot slot %d: %s; not used\n", s,
                       std::string(h.status().message()).c_str());
        }
        continue;
      }
      if (!Restorable(*h)) continue;  // another job's; with peers off, another rank's or world size's
      if (absl::Status st = region->Verify(s, *h); !st.ok()) {
        std::fprintf(stderr, "warning: %s; not used\n", std::string(st.message()).c_str());
        region->Invalidate(s);
        continue;
      }
      if (std::none_of(usable.begin(), usable.end(), [&](const Usable& u) { return u.step == h->step; })) {
        usable.push_back({h->step, h->unix_ms});
      }
    }
  }
  std::sort(usable.begin(), usable.end(), [](const Usable& a, const Usable& b) { return a.step > b.step; });
  return usable;
}

absl::StatusOr<MemorySnapshots::Found> MemorySnapshots::Find(int64_t step) {
  Finish();
  CheckedMutexLock lock(&mu_);
  Found found;
  bool own = false;  // the worker's own region holds some snapshot of this rank
  for (snapshot::MappedRegion* region : Sources()) {
    for (int s = 0; s < snapshot::kSlots; ++s) {
      absl::StatusOr<snapshot::SlotHeader> h = region->Header(s);
      if (h.ok() && Restorable(*h) && region == &region_) own = true;
      if (h.ok() && Restorable(*h) && h->step == step && found.region == nullptr) {
        found = Found{region, s, *h, false};
      }
    }
  }
  if (found.region == nullptr) return absl::NotFoundError(absl::StrCat("no in-memory snapshot of step ", step));
  DT_RETURN_IF_ERROR(found.region->Verify(found.slot, found.header));
  found.buddy_copy = found.region != &region_ && !own;
  return found;
}

absl::Status MemorySnapshots::Restore(int64_t step, const TrainState& state) {
  DT_ASSIGN_OR_RETURN(Found found, Find(step));
  restored_from_buddy_ = found.buddy_copy;
  restored_world_size_ = found.header.world_size;
  return RestorePayload(absl::string_view(found.region->Payload(found.slot), found.header.payload_bytes), state);
}

absl::StatusOr<absl::string_view> MemorySnapshots::Payload(int64_t step, uint64_t* hash) {
  DT_ASSIGN_OR_RETURN(Found found, Find(step));
  *hash = found.header.payload_hash;
  return absl::string_view(found.region->Payload(found.slot), found.header.payload_bytes);
}

absl::Status MemorySnapshots::Adopt(int64_t step, absl::string_view payload, uint64_t hash) {
  Finish();
  snapshot::SlotHeader h = OwnHeader(step, payload.size());
  h.payload_hash = hash;
  h.unix_ms = UnixMillisNow();
  CheckedMutexLock lock(&mu_);
  return snapshot::PlaceSnapshot(region_, h, [&](char* into) {
    std::memcpy(into, payload.data(), payload.size());
    return absl::OkStatus();
  });
}

uint64_t MemorySnapshots::PayloadCapacity() const {
  CheckedMutexLock lock(&mu_);
  return region_.layout().PayloadCapacity();
}

absl::Status MemorySnapshots::RestorePayload(absl::string_view payload, const TrainState& state) {
  // Only read: the views below are sources of copies.
  char* base = const_cast<char*>(payload.data());
  DT_ASSIGN_OR_RETURN(std::vector<snapshot::TensorRecord> toc, snapshot::DecodeToc(payload));
  DT_RETURN_IF_ERROR(MaterializeOptimizerState(*state.optimizer));
  std::vector<StateTensor> tensors = StateTensors(state);
  std::map<std::string, const snapshot::TensorRecord*> by_name;
  for (const snapshot::TensorRecord& r : toc) by_name[r.name] = &r;
  size_t matched = 0;
  for (const StateTensor& t : tensors) matched += by_name.count(t.name);
  if (by_name.size() != toc.size() || matched != toc.size()) {
    return absl::FailedPreconditionError(absl::StrCat("the snapshot holds ", toc.size(), " tensors, ",
                                                      toc.size() - matched, " of them unknown to this trainer"));
  }
  for (const StateTensor& t : tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end() && t.optional) continue;
    if (it == by_name.end() || it->second->dtype != static_cast<int32_t>(t.tensor.scalar_type()) ||
        it->second->sizes != t.tensor.sizes().vec()) {
      return absl::FailedPreconditionError(absl::StrCat("the snapshot's ", t.name, " does not fit this trainer"));
    }
  }
  torch::NoGradGuard no_grad;
  for (StateTensor& t : tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) continue;  // optional, checked above
    t.tensor.detach().copy_(ViewOf(base, *it->second));
    if (t.apply) t.apply();
  }
  return absl::OkStatus();
}

void MemorySnapshots::InvalidateWhere(const std::function<bool(const absl::StatusOr<snapshot::SlotHeader>&)>& drop) {
  CheckedMutexLock lock(&mu_);
  for (snapshot::MappedRegion* region : Sources()) {
    for (int s = 0; s < snapshot::kSlots; ++s) {
      if (drop(region->Header(s))) region->Invalidate(s);
    }
  }
}

void MemorySnapshots::DiscardAllBut(int64_t keep) {
  Finish();
  InvalidateWhere([&](const absl::StatusOr<snapshot::SlotHeader>& h) { return !h.ok() || !Restorable(*h) || h->step != keep; });
}

void MemorySnapshots::Discard(int64_t step) {
  InvalidateWhere([&](const absl::StatusOr<snapshot::SlotHeader>& h) { return h.ok() && Restorable(*h) && h->step == step; });
}

bool MemorySnapshots::Due(double step_seconds) {
  steps_s_ += step_seconds;
  ++steps_;
  return cadence_.Due(step_seconds);
}

// One snapshot on its way. `segments` cover the payload in order; a segment with a source is
// copied by the background thread, the others are already in place and only hashed.
struct MemorySnapshots::Copy {
  struct Segment {
    const char* src = nullptr;  // null: in the slot already, to be hashed only
    uint64_t offset = 0, bytes = 0;
    bool replicated = false;    // part of the replicas' fingerprint (parameters, optimizer state)
  };
  std::vector<Segment> segments;
  char* base = nullptr;             // the slot's payload: all of the region the copier touches
  std::vector<torch::Tensor> held;  // keeps the sources' storage alive until the copy is done
  DeviceSnapshotCopy device;        // a state on the GPU: its copies, on a side stream
  int slot = 0;
  snapshot::SlotHeader header;
  double cpu_s = 0;
  uint64_t fingerprint = 0;
  bool host_sources = false;       // segments the copier copies from live host tensors
  bool ordered_on_device = false;  // the step after it waited for the GPU's copies on the GPU
  double device_s = 0;             // the GPU's copies, first to last
  std::vector<snapshot::TensorRecord> records;  // its table, for a rescue's check of the values
  bool rescued = false;            // committed by a rescue (guarded by mu_): Finish must not commit it again
  std::atomic<bool> done{false};   // RunCopy finished
  std::mutex done_mu;              // with done_cv: a rescue's bounded wait for RunCopy's end
  std::condition_variable done_cv;
};

namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

MemorySnapshots::MemorySnapshots(snapshot::MappedRegion region, std::optional<snapshot::MappedRegion> replica,
                                 const DistEnv& env, uint64_t job, int forced_every)
    : region_(std::move(region)),
      replica_(std::move(replica)),
      env_(env),
      job_(job),
      cadence_(kCostBudget, forced_every) {}

MemorySnapshots::~MemorySnapshots() {
  Disarm();
  if (copier_.joinable()) copier_.join();
  // Not verified (a verifier is collective, and this may be an unwinding): a pending snapshot is
  // kept only where no verifier was asked for.
  if (!verifier_) Finish();
}

absl::Status MemorySnapshots::Begin(const TrainState& state) {
  Finish();
  CheckedMutexLock lock(&mu_);
  const Clock::time_point start = Clock::now();
  cadence_.Began();
  std::vector<StateTensor> tensors = StateTensors(state);
  std::vector<snapshot::TensorRecord> records;
  records.reserve(tensors.size());
  for (const StateTensor& t : tensors) records.push_back(RecordOf(t));
  const uint64_t total = snapshot::LayOut(records);
  std::vector<absl::StatusOr<snapshot::SlotHeader>> headers;
  for (int s = 0; s < snapshot::kSlots; ++s) headers.push_back(region_.Header(s));
  auto copy = std::make_unique<Copy>();
  copy->slot = snapshot::SlotToWrite(headers, state.progress->global_step);
  region_.Invalidate(copy->slot);
  // A rank whose snapshot cannot be taken still takes part in the replicas' check: the others
  // wait for it there.
  auto failed = [&](absl::Status st) {
    if (verifier_) verifier_(ReplicaFingerprint(state), state.progress->global_step);
    return st;
  };
  if (absl::Status st = region_.Reserve(copy->slot, total); !st.ok()) return failed(st);
  // The other slot too, now, rather than inside a later step (a no-op once done).
  if (absl::Status st = region_.Reserve(1 - copy->slot, total); !st.ok()) return failed(st);

  // A state on the GPU is copied alongside the next step unless DTRUN_SNAPSHOT_COPY says
  // otherwise: the copy is the GPU's DMA, not a core (snapshot_device_copy.h).
  const bool on_device = std::any_of(tensors.begin(), tensors.end(),
                                     [](const StateTensor& t) { return DeviceSnapshotCopy::Takes(t.tensor); });
  const bool overlap = background_ || (on_device && !copy_mode_given_);
  // The table, the padding and whatever may change before the next optimizer step are written
  // now (or, from the GPU, ordered before the next step); the rest is left to the copier.
  char* base = copy->base = region_.Payload(copy->slot);
  if (on_device) pins_.Pin(base, total);
  std::vector<size_t> after_the_fence;  // device tensors only the optimizer step changes
  const std::string toc = snapshot::EncodeToc(records);
  std::memcpy(base, toc.data(), toc.size());
  uint64_t at = toc.size();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const snapshot::TensorRecord& r = records[i];
    std::memset(base + at, 0, r.offset - at);  // alignment padding: hashed, so fixed
    const torch::Tensor t = tensors[i].tensor.detach();
    // Between steps everything plain goes to RunCopy too: copied and hashed while in cache.
    const bool replicated = tensors[i].changes_only_in_optimizer_step;
    if (IsPlainCpu(t, r) && (!overlap || replicated)) {
      copy->segments.push_back({static_cast<const char*>(t.data_ptr()), r.offset, r.nbytes, replicated});
      copy->held.push_back(t);
      copy->host_sources = true;
    } else if (IsPlainCpu(t, r)) {
      std::memcpy(base + r.offset, t.data_ptr(), r.nbytes);
    } else if (DeviceSnapshotCopy::Takes(t)) {
      // Hashed by the copier once the copies are done; the parameters after the fence below.
      if (replicated) {
        after_the_fence.push_back(i);
        copy->segments.push_back({nullptr, r.offset, r.nbytes, true});
      } else {
        copy->device.Enqueue(ViewOf(base, r), t, /*changes_before_optimizer_step=*/true);
      }
    } else {
      ViewOf(base, r).copy_(t);
      if (replicated) copy->segments.push_back({nullptr, r.offset, r.nbytes, true});
    }
    at = r.offset + r.nbytes;
  }
  std::memset(base + at, 0, total - at);
  for (size_t i : after_the_fence) {
    const torch::Tensor t = tensors[i].tensor.detach();
    copy->device.Enqueue(ViewOf(base, records[i]), t, /*changes_before_optimizer_step=*/false);
    copy->held.push_back(t);
  }
  copy->device.Close();

  copy->header = OwnHeader(state.progress->global_step, total);
  copy->records = std::move(records);
  copy_ = std::move(copy);
  bool started = false;
  if (overlap) {
    try {
      copier_ = std::thread([this, copy = copy_.get()] {
        UseAlternateSignalStackOnThisThread();  // its crash is reported too
        RunCopy(copy);
      });
      started = true;
    } catch (const std::system_error&) {
      // No thread to be had (a process limit): the copy is done here, between steps.
    }
  }
  if (!started) {
    RunCopy(copy_.get());
    copy_->cpu_s = 0;  // the training thread's own time, counted in begin_s_
  }
  begin_s_ = std::chrono::duration<double>(Clock::now() - start).count();
  return absl::OkStatus();
}

// Copies the remaining segments and hashes the payload in order; the caller commits the slot.
// Touches only `c` and its slot, which nothing else writes until Finish or a rescue has waited for
// `c.done`.
void MemorySnapshots::RunCopy(Copy* copy) {
  Copy& c = *copy;
  c.device.Wait();  // the GPU's copies into the slot, if any
  c.device_s = c.device.DeviceSeconds();
  const double cpu_start = ThreadCpuSeconds();
  char* base = c.base;
  snapshot::PayloadHasher hasher, fingerprint;
  uint64_t hashed = 0;
  for (const Copy::Segment& seg : c.segments) {
    hasher.Update(base + hashed, seg.offset - hashed);
    CopyAndHash(seg.src, base + seg.offset, seg.bytes, hasher, seg.replicated ? &fingerprint : nullptr);
    hashed = seg.offset + seg.bytes;
  }
  hasher.Update(base + hashed, c.header.payload_bytes - hashed);
  c.header.payload_hash = hasher.Digest();
  c.header.unix_ms = UnixMillisNow();
  c.fingerprint = fingerprint.Digest();
  c.cpu_s = ThreadCpuSeconds() - cpu_start;
  {
    std::lock_guard<std::mutex> lock(c.done_mu);
    c.done.store(true, std::memory_order_release);
  }
  c.done_cv.notify_all();  // c lives on: Finish destroys it only after joining this thread
}

bool MemorySnapshots::OrderAfterCopies() {
  CheckedMutexLock lock(&mu_);
  if (!copy_ || copy_->host_sources || !copier_.joinable()) return false;
  if (!copy_->device.OrderCurrentStreamAfter()) return false;
  copy_->ordered_on_device = true;
  return true;
}

bool MemorySnapshots::copy_done() const {
  CheckedMutexLock lock(&mu_);
  return copy_ && copy_->done.load(std::memory_order_acquire);
}

bool MemorySnapshots::Finish() {
  const Clock::time_point start = Clock::now();
  if (copier_.joinable()) copier_.join();
  std::unique_ptr<Copy> c;
  {
    CheckedMutexLock lock(&mu_);
    c = std::move(copy_);
  }  // a verifier that throws leaves nothing pending
  if (!c) return false;
  if (verifier_) verifier_(c->fingerprint, c->header.step);
  CheckedMutexLock lock(&mu_);
  // A rescue committed it already, and may have written a newer state over it since.
  if (!c->rescued) region_.Commit(c->slot, c->header);
  double waited = std::chrono::duration<double>(Clock::now() - start).count();
  // The step ordered after the copies on the GPU waited there for them, not here.
  if (c->ordered_on_device) waited += c->device_s;
  last_background_s_ = c->cpu_s;
  last_step_ = c->header.step;
  last_bytes_ = c->header.payload_bytes;
  Account(begin_s_ + waited);
  return true;
}

// The cost that sets the cadence counts the background copy's CPU time as if it were taken from
// the step: on a machine whose cores are all busy training (this 2-core one), it is.
void MemorySnapshots::Account(double seconds) {
  last_write_s_ = seconds;
  const double cost = seconds + last_background_s_;
  cadence_.Measured(cost);
  ++taken_;
  taken_s_ += seconds;
  background_s_ += last_background_s_;
}

absl::Status MemorySnapshots::Write(const TrainState& state) {
  absl::Status st = Begin(state);
  Finish();
  return st;
}

// How an armed state lies in a snapshot: the records laid out, their table, and how each is
// held. The same from one arming to the next while the listing's names and shapes are.
struct MemorySnapshots::ArmLayout {
  enum class Hold : uint8_t {
    kStash,       // host bytes that change before the next optimizer step: copied at Arm
    kLive,        // host bytes only the optimizer step changes: read at the rescue
    kDeviceCopy,  // on the device, changing before the next optimizer step: copied at Arm
    kDeviceLive,  // on the device, only the optimizer step changes it
  };
  std::vector<snapshot::TensorRecord> records;
  std::vector<Hold> holds;         // by record
  std::vector<uint64_t> stash_at;  // by record: where a kStash record's bytes are in the stash
  uint64_t stash_bytes = 0;
  std::optional<torch::Device> device;  // of the records outside host memory
  std::string toc;
  uint64_t total = 0;

  // Null where the tensors outside host memory are on more than one device.
  static std::shared_ptr<const ArmLayout> Of(const std::vector<StateTensor>& tensors);
  // Whether `tensors` lie as laid out here: the same names, dtypes, shapes and holds.
  bool Fits(const std::vector<StateTensor>& tensors) const;
  static Hold HoldOf(const StateTensor& st, const snapshot::TensorRecord& r);
  static bool OnDevice(Hold h) { return h == Hold::kDeviceCopy || h == Hold::kDeviceLive; }
};

// The state armed after an optimizer step: per tensor of the table, its source at Rescue time. What
// changes before the next optimizer step is a copy taken at Arm; the rest is the live tensor. Host
// memory is read at Rescue by memcpy; anything else (a state on the GPU) is copied by torch, after
// `mark`, the point on the GPU where it is whole.
struct MemorySnapshots::Armed {
  std::shared_ptr<const ArmLayout> layout;
  std::vector<const char*> sources;    // by record: into `stash`, the live tensor's bytes, or null
  std::vector<torch::Tensor> tensors;  // by record where `sources` is null: live, or copied at Arm
  std::vector<torch::Tensor> held;     // the live tensors read by memcpy, alive until the rescue is done
  // The bytes of what changes before the next optimizer step; every byte is copied in at Arm.
  std::vector<char, UninitializedAllocator<char>> stash;
  std::unique_ptr<DeviceMark> mark;  // set where `tensors` has any
  int64_t step = 0;
};

namespace {

// Copies of `tensors` in one kernel per dtype and device, not one per tensor: arming a ResNet-50
// on the GPU copies its 160 batch-norm buffers every step, and 160 launches would cost the host
// about a millisecond a step.
std::vector<torch::Tensor> CopiesInFewKernels(const std::vector<torch::Tensor>& tensors) {
  std::map<std::pair<std::string, int>, std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    groups[{tensors[i].device().str(), static_cast<int>(tensors[i].scalar_type())}].push_back(i);
  }
  std::vector<torch::Tensor> out(tensors.size());
  for (const auto& [key, members] : groups) {
    std::vector<torch::Tensor> flat;
    for (size_t i : members) flat.push_back(tensors[i].reshape(-1));
    const torch::Tensor all = torch::cat(flat);
    int64_t at = 0;
    for (size_t i : members) {
      const int64_t n = tensors[i].numel();
      out[i] = all.narrow(0, at, n).view(tensors[i].sizes());
      at += n;
    }
  }
  return out;
}

}  // namespace

MemorySnapshots::ArmLayout::Hold MemorySnapshots::ArmLayout::HoldOf(const StateTensor& st,
                                                                    const snapshot::TensorRecord& r) {
  if (IsPlainCpu(st.tensor, r)) return st.changes_only_in_optimizer_step ? Hold::kLive : Hold::kStash;
  return st.changes_only_in_optimizer_step ? Hold::kDeviceLive : Hold::kDeviceCopy;
}

std::shared_ptr<const MemorySnapshots::ArmLayout> MemorySnapshots::ArmLayout::Of(
    const std::vector<StateTensor>& tensors) {
  auto l = std::make_shared<ArmLayout>();
  for (const StateTensor& st : tensors) {
    snapshot::TensorRecord r = RecordOf(st);
    const Hold h = HoldOf(st, r);
    l->holds.push_back(h);
    l->stash_at.push_back(l->stash_bytes);
    if (h == Hold::kStash) l->stash_bytes += r.nbytes;
    if (OnDevice(h)) {
      if (l->device && *l->device != st.tensor.device()) return nullptr;
      l->device = st.tensor.device();
    }
    l->records.push_back(std::move(r));
  }
  l->total = snapshot::LayOut(l->records);
  l->toc = snapshot::EncodeToc(l->records);
  return l;
}

bool MemorySnapshots::ArmLayout::Fits(const std::vector<StateTensor>& tensors) const {
  if (tensors.size() != records.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i].tensor;
    const snapshot::TensorRecord& r = records[i];
    if (tensors[i].name != r.name || static_cast<int32_t>(t.scalar_type()) != r.dtype || t.sizes() != r.sizes)
      return false;
    // RecordOf's strides: the tensor's own where it is dense, else contiguous ones.
    if (t.is_non_overlapping_and_dense() ? t.strides() != r.strides : ContiguousStrides(r.sizes) != r.strides) {
      return false;
    }
    if (HoldOf(tensors[i], r) != holds[i] || (OnDevice(holds[i]) && t.device() != *device)) return false;
  }
  return true;
}

// The state as Rescue would write it; null where its tensors outside host memory are on more than
// one device (one GPU per rank is the rule; there would be no one point to copy them after).
std::unique_ptr<MemorySnapshots::Armed> MemorySnapshots::ArmedState(const TrainState& state) {
  const std::vector<StateTensor>& tensors = listing_.Read(state);
  if (!arm_layout_ || !arm_layout_->Fits(tensors)) {
    arm_layout_ = ArmLayout::Of(tensors);
    if (!arm_layout_) return nullptr;
  }
  const ArmLayout& l = *arm_layout_;
  auto a = std::make_unique<Armed>();
  a->layout = arm_layout_;
  a->stash.resize(l.stash_bytes);
  a->sources.resize(tensors.size(), nullptr);
  a->tensors.resize(tensors.size());
  std::vector<size_t> copied_now;  // on the device, changed before the next optimizer step
  std::vector<torch::Tensor> to_copy;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i].tensor;
    switch (l.holds[i]) {
      case ArmLayout::Hold::kStash:
        std::memcpy(a->stash.data() + l.stash_at[i], t.data_ptr(), l.records[i].nbytes);
        a->sources[i] = a->stash.data() + l.stash_at[i];
        break;
      case ArmLayout::Hold::kLive:
        a->sources[i] = static_cast<const char*>(t.data_ptr());
        a->held.push_back(t);
        break;
      case ArmLayout::Hold::kDeviceCopy:
        copied_now.push_back(i);
        to_copy.push_back(t.detach());
        break;
      case ArmLayout::Hold::kDeviceLive:
        a->tensors[i] = t.detach();
        break;
    }
  }
  std::vector<torch::Tensor> copies = CopiesInFewKernels(to_copy);
  for (size_t k = 0; k < copied_now.size(); ++k) a->tensors[copied_now[k]] = std::move(copies[k]);
  // After the copies above: on the GPU, the point where the armed state is whole.
  if (l.device) a->mark = std::make_unique<DeviceMark>(*l.device);
  a->step = state.progress->global_step;
  return a;
}

void MemorySnapshots::Arm(const TrainState& state) {
  const Clock::time_point start = Clock::now();
  std::unique_ptr<Armed> armed;
  if (!rescue_off_) {
    torch::NoGradGuard no_grad;
    armed = ArmedState(state);
    // A state on several devices stays so: no need to list it again every step.
    if (!armed) rescue_off_ = true;
  }
  CheckedMutexLock lock(&mu_);
  if (armed && !armed_) cadence_.set_budget(kCostBudgetWithRescue);
  armed_ = std::move(armed);
  if (!armed_) return;
  ++arms_;
  arms_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  // A stop signal came while the optimizer step ran (nothing armed then): this state is the one
  // to keep, before the process blocks in the step's vote with a rank that is gone.
  if (rescue_wanted_) {
    try {
      RescueLocked();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: rank %d: state not kept in memory on the way out: %s\n", env_.rank, e.what());
    }
  }
}

void MemorySnapshots::Disarm() {
  CheckedMutexLock lock(&mu_);
  armed_.reset();
}

bool MemorySnapshots::armed() const {
  CheckedMutexLock lock(&mu_);
  return armed_ != nullptr;
}

int64_t MemorySnapshots::Rescue() noexcept {
  try {
    CheckedMutexLock lock(&mu_);
    return RescueLocked();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: rank %d: state not kept in memory on the way out: %s\n", env_.rank, e.what());
    return -1;
  }
}

// The slot a rescued state (not compared across the replicas) may take: one holding a snapshot the
// replicas have not agreed on either, else the older one. The newest agreed state is never given
// up for it: it is the way back if the rescued one turns out to differ.
int MemorySnapshots::RescueSlot(const std::vector<absl::StatusOr<snapshot::SlotHeader>>& headers) const {
  int unagreed = -1;
  for (int s = 0; s < static_cast<int>(headers.size()); ++s) {
    const absl::StatusOr<snapshot::SlotHeader>& h = headers[s];
    if (!h.ok() || !Restorable(*h)) return s;  // empty, damaged or not this rank's to restore
    if (h->step > agreed_step_ && (unagreed < 0 || h->step < headers[unagreed]->step)) unagreed = s;
  }
  if (unagreed >= 0) return unagreed;
  return headers[0]->step < headers[1]->step ? 0 : 1;
}

void MemorySnapshots::SetReports(const progress::ProgressClient* reports) {
  CheckedMutexLock lock(&mu_);
  reports_ = reports;
}

void MemorySnapshots::set_rescue_wait_seconds(double s) {
  CheckedMutexLock lock(&mu_);
  rescue_wait_s_ = s;
}

void MemorySnapshots::MarkAgreed(int64_t step) {
  CheckedMutexLock lock(&mu_);
  agreed_step_ = std::max(agreed_step_, step);
}

int64_t MemorySnapshots::RescueLocked() {
  if (!armed_) {
    rescue_wanted_ = true;  // the optimizer step is under way: the next Arm keeps its result
    return -1;
  }
  rescue_wanted_ = false;
  const Clock::time_point start = Clock::now();
  std::unique_ptr<Armed> a = std::move(armed_);
  // A periodic snapshot still on its way (copied alongside the next step: a state on the GPU, or
  // DTRUN_SNAPSHOT_COPY=background) commits only in Finish, which a process on its way out never
  // reaches. It is the armed state's own step, or (a lone rank on the GPU) the one before.
  if (copy_ && !copy_->rescued) {
    if (reports_) reports_->Keeping(a->step, static_cast<int64_t>(a->layout->total));
    if (!KeepPendingLocked(start)) {
      if (reports_) reports_->NotKept(a->step);
      return -1;
    }
    if (copy_->header.step == a->step) {
      if (reports_) reports_->Kept(a->step);
      return a->step;
    }
  }
  std::vector<absl::StatusOr<snapshot::SlotHeader>> headers;
  for (int s = 0; s < snapshot::kSlots; ++s) headers.push_back(region_.Header(s));
  for (const absl::StatusOr<snapshot::SlotHeader>& h : headers) {
    // A snapshot of this step is held already (also one taken in another world size and restored).
    if (h.ok() && Restorable(*h) && h->step == a->step) {
      if (reports_) reports_->Kept(a->step);
      return -1;
    }
  }
  Copy c;
  c.slot = RescueSlot(headers);
  // First: the agent stopping this process waits for the write rather than kill it mid-way. It
  // hears how the write ended whichever way it ends (an exception from torch included).
  if (reports_) reports_->Keeping(a->step, static_cast<int64_t>(a->layout->total));
  bool kept = false;
  absl::Cleanup say_not_kept = [&, reports = reports_] {
    if (reports && !kept) reports->NotKept(a->step);
  };
  std::string not_kept;
  if (absl::Status st = WriteArmed(*a, &c); !st.ok()) {
    not_kept = std::string(st.message());
  } else if (std::optional<std::string> name = FirstNotFinite(c.base, a->layout->records)) {
    // The state may come from a step whose vote never ran: a loss that was not finite on the rank
    // that failed would have made it so everywhere.
    not_kept = *name + " is not finite";
  }
  if (!not_kept.empty()) {
    region_.Invalidate(c.slot);
    std::fprintf(stderr, "warning: rank %d: state of step %lld not kept in memory on the way out: %s\n", env_.rank,
                 static_cast<long long>(a->step), not_kept.c_str());
    return -1;
  }
  region_.Commit(c.slot, c.header);
  std::fprintf(stderr, "rank %d: kept the state of step %lld in memory on the way out (%.1f MB in %.1f ms)\n",
               env_.rank, static_cast<long long>(a->step), a->layout->total / 1e6,
               1e3 * std::chrono::duration<double>(Clock::now() - start).count());
  ++rescued_;
  kept = true;
  if (reports_) reports_->Kept(a->step);  // last: the agent may kill this process as soon as it hears
  return a->step;
}

// The pending snapshot, committed once its copy is done (waited for within the rescue's bound) and
// its values are finite, as a rescued state is: not compared across the replicas. Whether it was.
bool MemorySnapshots::KeepPendingLocked(Clock::time_point start) {
  Copy& c = *copy_;
  {
    std::unique_lock<std::mutex> lock(c.done_mu);
    const auto bound = std::chrono::duration<double>(rescue_wait_s_);
    if (!c.done_cv.wait_for(lock, bound, [&c] { return c.done.load(std::memory_order_acquire); })) {
      // The copier still writes into the slot: nothing may be written there, nor committed.
      std::fprintf(stderr,
                   "warning: rank %d: the snapshot of step %lld being copied was not done within %.0f s: not kept\n",
                   env_.rank, static_cast<long long>(c.header.step), rescue_wait_s_);
      return false;
    }
  }
  if (std::optional<std::string> name = FirstNotFinite(c.base, c.records)) {
    std::fprintf(stderr, "warning: rank %d: the snapshot of step %lld being copied not kept: %s is not finite\n",
                 env_.rank, static_cast<long long>(c.header.step), name->c_str());
    return false;
  }
  region_.Commit(c.slot, c.header);
  c.rescued = true;
  ++rescued_;
  std::fprintf(stderr,
               "rank %d: kept the state of step %lld in memory on the way out (%.1f MB, its snapshot's copy finished "
               "in %.1f ms)\n",
               env_.rank, static_cast<long long>(c.header.step), c.header.payload_bytes / 1e6,
               1e3 * std::chrono::duration<double>(Clock::now() - start).count());
  return true;
}

// Writes `a` into `c->slot` (table, padding, every tensor from its source) and fills in the header;
// the caller commits.
absl::Status MemorySnapshots::WriteArmed(const Armed& a, Copy* c) {
  const ArmLayout& l = *a.layout;
  region_.Invalidate(c->slot);
  DT_RETURN_IF_ERROR(region_.Reserve(c->slot, l.total));
  char* base = c->base = region_.Payload(c->slot);
  std::memcpy(base, l.toc.data(), l.toc.size());
  uint64_t at = l.toc.size();
  std::vector<torch::Tensor> dsts, srcs;  // copied by torch (from the GPU), then hashed in place
  for (size_t i = 0; i < l.records.size(); ++i) {
    const snapshot::TensorRecord& r = l.records[i];
    std::memset(base + at, 0, r.offset - at);
    c->segments.push_back({a.sources[i], r.offset, r.nbytes, false});
    if (a.sources[i] == nullptr) {
      dsts.push_back(ViewOf(base, r));
      srcs.push_back(a.tensors[i]);
    }
    at = r.offset + r.nbytes;
  }
  std::memset(base + at, 0, l.total - at);
  if (!dsts.empty()) DT_RETURN_IF_ERROR(a.mark->CopyAfter(dsts, srcs, rescue_wait_s_));
  c->header = OwnHeader(a.step, l.total);
  RunCopy(c);
  return absl::OkStatus();
}


std::string MemorySnapshots::Summary() const {
  const double each_ms = taken_ ? 1e3 * taken_s_ / taken_ : 0;
  const double share = steps_s_ > 0 ? 100 * taken_s_ / steps_s_ : 0;
  std::string s =
      absl::StrFormat("%d in-memory snapshots of %.1f MB, every %d step%s, %.1f ms each (%.1f%% of the step time)",
                      taken_, last_bytes_ / 1e6, every(), every() == 1 ? "" : "s", each_ms, share);
  if (background_s_ > 0) {
    absl::StrAppendFormat(&s, ", plus %.1f ms of CPU each copying alongside the next step (%.1f%%)",
                          1e3 * background_s_ / taken_, steps_s_ > 0 ? 100 * background_s_ / steps_s_ : 0);
  }
  CheckedMutexLock lock(&mu_);
  if (arms_ > 0) {
    absl::StrAppendFormat(&s, "; armed for a failure after %d steps, %.2f ms each (%.2f%%)", arms_, 1e3 * arms_s_ / arms_,
                          steps_s_ > 0 ? 100 * arms_s_ / steps_s_ : 0);
  }
  if (rescued_ > 0) absl::StrAppendFormat(&s, "; %d kept on the way out", rescued_);
  return s;
}

}  // namespace dtrun::worker

// The worker's end of in-memory snapshots (snapshot/snapshot_region.h): writes a TrainState into
// the region its agent holds for this local rank, decides how often, and restores from it.
//
// Cadence: every step whose cost allows it. The writer keeps the snapshot's cost under
// kCostBudget of the step time by snapshotting every k-th step (worker/snapshot_cadence.h), or every
// DTRUN_SNAPSHOT_EVERY steps when dtrun --snapshot-every is given. Every rank of the job must
// snapshot the same steps (a restore needs a step every rank holds), so the trainer all-reduces
// Due() and snapshots when any rank asks.
//
// Overlap (DTRUN_SNAPSHOT_COPY=background; off by default): Begin() copies at once only what may
// change before the next optimizer step (progress, RNG, the model's buffers, which a forward pass
// updates); a background thread copies the parameters and the optimizer state, hashes the payload
// and commits it while the next step's forward and backward run. The trainer calls Finish()
// before its next optimizer step. A crash before the commit leaves the previous snapshot whole.
// For a state on the CPU the whole copy is made in Begin by default, between steps: on a CPU whose
// cores all train, the overlap measured no cheaper (docs/BENCHMARKS.md). A state on the GPU is
// copied alongside by default, by the GPU's DMA (worker/snapshot_device_copy.h).
//
// Replica checks ride on the copy: the bytes of the parameters and the optimizer state are also
// hashed into a fingerprint while they are in cache (for contiguous tensors the same as
// worker::ReplicaFingerprint), handed to the verifier, when one is set, in Finish before the
// commit. A verifier that throws leaves the slot uncommitted: the previous snapshot stays newest.
// The trainers' verifier only records it, for the next step's all-reduce (worker/step_agreement.h).
//
// Snapshots on failure (docs/DESIGN.md): after every optimizer step the trainer arms the state it
// now holds (Arm copies only what changes before the next optimizer step: progress, RNG, buffers,
// loss scale; about as much as a step's progress report). Parameters and optimizer state stay
// where they are. When the process fails before its next optimizer step (a collective with a rank
// that is gone throws, or dtrun stops it with SIGTERM after another rank failed), Rescue writes
// that state as a snapshot. A crash of another rank then costs no step, whatever the cadence, so
// the periodic snapshots, still there for what Rescue cannot cover (this process's own crash,
// a failure inside the optimizer step), keep a smaller budget. A state on the GPU is armed in
// place too, and copied out at Rescue on a side stream (DeviceMark).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/checked_mutex.h"
#include "progress/progress_client.h"
#include "snapshot/snapshot_region.h"
#include "worker/dist_env.h"
#include "worker/snapshot_cadence.h"
#include "worker/snapshot_device_copy.h"
#include "worker/train_state.h"

namespace dtrun::worker {

class MemorySnapshots {
 public:
  static constexpr double kCostBudget = 0.02;
  // The budget once Rescue is armed: periodic snapshots only cover what it cannot.
  static constexpr double kCostBudgetWithRescue = 0.0025;

  // From DTRUN_SNAPSHOT_FD. nullptr when not under dtrun or snapshots are off; a variable that
  // names no region is said once on stderr and also gives nullptr.
  static std::unique_ptr<MemorySnapshots> FromEnvironment(const DistEnv& env);

  // At most this many usable steps: two in the worker's region, two in its replica region.
  static constexpr int kMaxSteps = 2 * snapshot::kSlots;
  // Steps of complete snapshots in this rank's regions (its own, and the replica region of a
  // multi-node job: DTRUN_SNAPSHOT_REPLICA_FD) that this rank may restore (snapshot/peer_restores.h:
  // any rank's of this job, in any world size it ran in; with DTRUN_SNAPSHOT_PEERS=off only this
  // rank's in this world size), whose payload passes its checksum; newest first, each once.
  // Damaged ones are named on stderr.
  std::vector<int64_t> UsableSteps();
  // The same, each with when its snapshot was completed (Unix ms; of two copies of a step, the
  // first found): what the ranks weigh when no step is held by enough of them (restore_choice.h).
  struct Usable {
    int64_t step = -1;
    int64_t completed_ms = 0;
  };
  std::vector<Usable> UsableSnapshots();
  // Restores the snapshot of `step` into `state`: all or nothing (the table is checked against
  // the state before any byte is copied). DataLoss/FailedPrecondition name what does not fit.
  absl::Status Restore(int64_t step, const TrainState& state);
  // The checked payload of this rank's snapshot of `step` and its checksum: what a rank that
  // lacks the step receives (job_resume.h). Valid until the next snapshot or discard.
  absl::StatusOr<absl::string_view> Payload(int64_t step, uint64_t* hash);
  // Restores from a payload written by any rank of the job (another rank's copy of a step),
  // checked as Restore checks its own.
  absl::Status RestorePayload(absl::string_view payload, const TrainState& state);
  // Keeps `payload`, another rank's copy of `step` whose checksum `hash` was checked, as this
  // rank's own snapshot of it: a rank that received its state then holds it as its peers do (for a
  // second failure before its next snapshot, and for --snapshot-dir). DataLoss if the copy in the
  // slot does not match `hash`; the slot stays empty then.
  absl::Status Adopt(int64_t step, absl::string_view payload, uint64_t hash);
  // The largest payload a slot of this rank's region holds (the --snapshot-memory cap).
  uint64_t PayloadCapacity() const;
  // Whether the last Restore read a copy fetched from the buddy node (this node held none).
  bool restored_from_buddy() const { return restored_from_buddy_; }
  // The world size the job ran in when it took the snapshot the last Restore read (-1: none yet):
  // another than this one after an elastic change, or a run given other --nproc-per-node.
  int64_t restored_world_size() const { return restored_world_size_; }
  // Empties every slot not holding `keep` (-1: all): a state the job went back past must never be
  // chosen later, when the job reaches its step again on another path.
  void DiscardAllBut(int64_t keep);
  // Empties the slots holding `step`: a state the replicas turned out not to agree on. A copy
  // still running is left alone.
  void Discard(int64_t step);

  // Called after every optimizer step with its duration: whether this rank wants a snapshot now.
  bool Due(double step_seconds);
  // Starts a snapshot of the state (its progress names the step), finishing any earlier one
  // first. Errors (memory cap, no memory) are returned and leave the other slot as it was.
  absl::Status Begin(const TrainState& state);
  // Waits for the snapshot begun last, verifies and commits it and accounts for it; false if none
  // was pending. Must be called before the parameters or the optimizer state change again, by
  // every rank at the same point when the verifier is collective. The verifier's exception
  // passes through, the snapshot dropped.
  bool Finish();
  // Called by Finish with the pending snapshot's fingerprint and step, before it is committed.
  using Verifier = std::function<void(uint64_t fingerprint, int64_t step)>;
  void SetVerifier(Verifier verifier) { verifier_ = std::move(verifier); }
  // Whether a background copy is still running (Finish has something to wait for).
  bool copying() const { return copier_.joinable(); }
  // For a state on the GPU: the current stream waits, on the GPU, for the pending snapshot's
  // copies, so the next optimizer step can be queued without Finish; Finish, later or in the next
  // Begin, then waits only for the hashing. False (call Finish) when none is pending or it copies
  // host memory too.
  bool OrderAfterCopies();
  // Whether the pending snapshot's copy and hash are done: Finish would not wait.
  bool copy_done() const;
  // Begin, then Finish: the snapshot is complete on return.
  absl::Status Write(const TrainState& state);

  // After an optimizer step: `state` (its progress naming the step and the position) is what
  // Rescue writes until Disarm. A state on the GPU is armed where the GPU will have it: the
  // parameters and the optimizer state as they are, a copy of the rest queued on the current
  // stream, and a mark after them (DeviceMark); nothing waits for the GPU. Not armed with
  // DTRUN_SNAPSHOT_ON_FAILURE=off, or for a state on more than one device.
  void Arm(const TrainState& state);
  // Before the parameters or the optimizer state change again; waits for a Rescue under way.
  void Disarm();
  // From any thread: writes the armed state as a snapshot unless one of its step is held already
  // (or a value is not finite). A periodic snapshot still being copied (alongside the next step)
  // is finished and committed first: it is the armed step's, or the one before. Says what it did
  // on stderr; returns the step written, or -1. Never throws. Called while nothing is armed (an optimizer
  // step under way), the next Arm writes its state at once. A state on the GPU is copied out on a
  // side stream once the GPU has passed the armed step's mark, not after what the current stream
  // holds (often a collective with the rank that is gone, which never ends); each wait for the
  // GPU is bounded by kRescueWaitSeconds (set_rescue_wait_seconds, for tests).
  int64_t Rescue() noexcept;
  static constexpr double kRescueWaitSeconds = 10;
  void set_rescue_wait_seconds(double s);
  bool armed() const;
  // Where Rescue says (to the agent) that it begins to write the armed state (`keeping`), and
  // then that it kept it (written now or held already) or could not: the agent stopping this
  // process waits for the write, then kills it at once. Null: nobody is told. Outlives this.
  void SetReports(const progress::ProgressClient* reports);
  // The replicas compared and agreed on the snapshot of `step` (worker/step_agreement.h): Rescue
  // never writes over the newest such one.
  void MarkAgreed(int64_t step);

  ~MemorySnapshots();
  MemorySnapshots(const MemorySnapshots&) = delete;
  MemorySnapshots& operator=(const MemorySnapshots&) = delete;

  int64_t last_step() const { return last_step_; }
  // What the last snapshot cost the training thread (Begin, and the wait in Finish), and the CPU
  // time its background copy took.
  double last_write_seconds() const { return last_write_s_; }
  double last_background_seconds() const { return last_background_s_; }
  uint64_t last_bytes() const { return last_bytes_; }
  int every() const { return cadence_.every(); }
  // "12 in-memory snapshots of 94.4 MB, every 3 steps, 31.0 ms each (1.8% of the step time)".
  std::string Summary() const;

 private:
  MemorySnapshots(snapshot::MappedRegion region, std::optional<snapshot::MappedRegion> replica, const DistEnv& env,
                  uint64_t job, int forced_every);
  struct Copy;  // one snapshot on its way: what the background thread copies and hashes
  void RunCopy(Copy* copy);
  void Account(double seconds);
  bool Restorable(const snapshot::SlotHeader& h) const;
  // This rank's header for a snapshot of `step` (its checksum and time are the writer's to add).
  snapshot::SlotHeader OwnHeader(int64_t step, uint64_t payload_bytes) const;
  struct Found {
    snapshot::MappedRegion* region = nullptr;
    int slot = -1;
    snapshot::SlotHeader header;
    bool buddy_copy = false;  // only the replica region holds this rank's snapshots
  };
  // This rank's snapshot of `step`, its payload checked. Its callers read the payload once the
  // lock is released: they restore before anything is armed, so no rescue writes there meanwhile.
  absl::StatusOr<Found> Find(int64_t step);
  // The worker's region, then the replica region.
  std::vector<snapshot::MappedRegion*> Sources() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Invalidates every slot of Sources() whose header `drop` says.
  void InvalidateWhere(const std::function<bool(const absl::StatusOr<snapshot::SlotHeader>&)>& drop);

  struct Armed;      // the state Rescue writes
  struct ArmLayout;  // how it lies in a snapshot, kept from one arming to the next
  std::unique_ptr<Armed> ArmedState(const TrainState& state);
  int64_t RescueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool KeepPendingLocked(std::chrono::steady_clock::time_point start) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteArmed(const Armed& a, Copy* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int RescueSlot(const std::vector<absl::StatusOr<snapshot::SlotHeader>>& headers) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // What Rescue, on the stop-signal thread, shares with the training thread: the regions' slots,
  // the snapshot on its way and the armed state. The copier thread touches only its Copy.
  mutable CheckedMutex mu_;
  snapshot::MappedRegion region_ ABSL_GUARDED_BY(mu_);
  std::optional<snapshot::MappedRegion> replica_ ABSL_GUARDED_BY(mu_);
  HostPins pins_ ABSL_GUARDED_BY(mu_);  // the slots' pages pinned for the GPU's copies; unpinned before the unmapping
  std::unique_ptr<Copy> copy_ ABSL_GUARDED_BY(mu_);  // the snapshot begun last, until Finish
  std::unique_ptr<Armed> armed_ ABSL_GUARDED_BY(mu_);
  bool rescue_wanted_ ABSL_GUARDED_BY(mu_) = false;  // Rescue came while nothing was armed
  double rescue_wait_s_ ABSL_GUARDED_BY(mu_) = kRescueWaitSeconds;
  int64_t agreed_step_ ABSL_GUARDED_BY(mu_) = -1;  // the newest snapshot step the replicas agreed on
  const progress::ProgressClient* reports_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t arms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rescued_ ABSL_GUARDED_BY(mu_) = 0;
  double arms_s_ ABSL_GUARDED_BY(mu_) = 0;  // the total time of Arm
  // Arm's, on the training thread only: the state listed and laid out at the arming before.
  StateListing listing_;
  std::shared_ptr<const ArmLayout> arm_layout_;

  // Set before the object is handed out (FromEnvironment), then only read, from any thread.
  DistEnv env_;
  uint64_t job_;
  bool peers_ = true;  // snapshot::PeerRestoresAllowed()

  // The training thread's alone.
  bool rescue_off_ = false;  // DTRUN_SNAPSHOT_ON_FAILURE=off, or a state on several devices
  bool restored_from_buddy_ = false;
  int64_t restored_world_size_ = -1;
  SnapshotCadence cadence_;
  double last_write_s_ = 0;
  uint64_t last_bytes_ = 0;
  bool background_ = false;       // DTRUN_SNAPSHOT_COPY=background
  bool copy_mode_given_ = false;  // DTRUN_SNAPSHOT_COPY is set: a state on the GPU follows it too
  Verifier verifier_;
  std::thread copier_;
  double begin_s_ = 0;          // the training thread's time in Begin for copy_
  int64_t last_step_ = -1;
  double last_background_s_ = 0;
  int64_t taken_ = 0;
  double taken_s_ = 0;       // their total cost
  double background_s_ = 0;  // the total CPU time of background copies
  double steps_s_ = 0;       // the total of the step times seen by Due
  int64_t steps_ = 0;
};

}  // namespace dtrun::worker

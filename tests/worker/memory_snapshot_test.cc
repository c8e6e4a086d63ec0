#include "worker/memory_snapshot.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/env_names.h"
#include "gtest/gtest.h"
#include "progress/progress_client.h"
#include "snapshot/payload_toc.h"
#include "snapshot/snapshot_region.h"
#include "tests/worker/snapshot_jobs.h"

namespace dtrun::worker {
namespace {

using testing::ExpectEqualValues;
using testing::Job;
using testing::RankOf;
using testing::Snapshots;

TEST(MemorySnapshotsTest, ASnapshotHoldsTheStateAtBeginThoughTheNextForwardRunsDuringTheCopy) {
  Snapshots snapshots("background");
  ASSERT_NE(snapshots.operator->(), nullptr);
  Job job;
  const std::vector<torch::Tensor> at_begin = job.Values();
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());
  job.optimizer.zero_grad();
  job.Forward();  // moves batch norm's running statistics while the parameters are being copied
  ASSERT_TRUE(snapshots->Finish());
  job.optimizer.step();
  ++job.progress.global_step;

  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  ASSERT_TRUE(snapshots->Restore(1, job.State()).ok());
  ExpectEqualValues(job.Values(), at_begin);
}

// What the background copy may take is what only the optimizer step writes: the parameters and
// the optimizer's state, never the buffers (a forward pass writes them) or the small copies.
TEST(MemorySnapshotsTest, OnlyParametersAndOptimizerStateAreLeftToTheBackgroundCopy) {
  Job job;
  int deferred = 0;
  for (const StateTensor& t : StateTensors(job.State())) {
    const bool param_or_optim = t.name.rfind("param/", 0) == 0 || t.name.rfind("optim/", 0) == 0;
    EXPECT_EQ(t.changes_only_in_optimizer_step, param_or_optim) << t.name;
    deferred += t.changes_only_in_optimizer_step;
  }
  EXPECT_EQ(deferred, 2 * 6);  // 6 parameters (two linears, batch norm), each with momentum
}

TEST(MemorySnapshotsTest, TheBackgroundCopyWritesTheSamePayloadAsACopyBetweenSteps) {
  Snapshots background("background"), between_steps(nullptr);
  Job job;
  ASSERT_TRUE(background->Write(job.State()).ok());
  ASSERT_TRUE(between_steps->Write(job.State()).ok());
  EXPECT_NE(background.HashOfStep(1), 0u);
  EXPECT_EQ(background.HashOfStep(1), between_steps.HashOfStep(1));
  EXPECT_GT(background->last_background_seconds(), 0);
  EXPECT_EQ(between_steps->last_background_seconds(), 0);
}

// Only the GPU's copies can be waited for on the GPU: a state on the host, copied by the copier
// thread from live tensors, must be finished by the host before the optimizer step.
TEST(MemorySnapshotsTest, AStateOnTheHostIsNeverOrderedOnTheGpu) {
  Snapshots snapshots("background");
  Job job;
  EXPECT_FALSE(snapshots->OrderAfterCopies());  // nothing pending
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());
  ASSERT_TRUE(snapshots->copying());
  EXPECT_FALSE(snapshots->OrderAfterCopies());
  ASSERT_TRUE(snapshots->Finish());
  EXPECT_FALSE(snapshots->copy_done());  // nothing pending after Finish
}

TEST(MemorySnapshotsTest, BeginningASnapshotFinishesTheOneBefore) {
  Snapshots snapshots("background");
  Job job;
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());
  ASSERT_TRUE(snapshots->Finish());  // the trainer's fence before its optimizer step
  job.Step();
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());
  job.Forward();
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());  // the same step again (a checkpoint): its own slot
  EXPECT_EQ(snapshots->UsableSteps(), (std::vector<int64_t>{2, 1}));
  EXPECT_FALSE(snapshots->Finish());  // UsableSteps waited for it
}

// The replica check rides on the copy: the verifier sees the state's fingerprint (the same as
// ReplicaFingerprint's) before the slot is committed, in both copy modes, and a verifier that
// throws leaves the snapshot out: the previous one stays the newest.
TEST(MemorySnapshotsTest, TheVerifierSeesTheReplicaFingerprintAndARefusalKeepsTheSnapshotOut) {
  for (const char* mode : {"background", "sync"}) {
    Snapshots snapshots(mode);
    Job job;
    std::vector<std::pair<uint64_t, int64_t>> seen;
    bool refuse = false;
    snapshots->SetVerifier([&](uint64_t fingerprint, int64_t step) {
      seen.emplace_back(fingerprint, step);
      if (refuse) throw std::runtime_error("diverged");
    });
    ASSERT_TRUE(snapshots->Write(job.State()).ok());
    ASSERT_EQ(seen.size(), 1u) << mode;
    EXPECT_EQ(seen[0].first, ReplicaFingerprint(job.State())) << mode;
    EXPECT_EQ(seen[0].second, 1) << mode;
    job.Step();
    refuse = true;
    ASSERT_TRUE(snapshots->Begin(job.State()).ok());
    EXPECT_THROW(snapshots->Finish(), std::runtime_error) << mode;
    EXPECT_NE(seen.back().first, seen[0].first) << "the step changed the parameters";
    EXPECT_FALSE(snapshots->Finish()) << "nothing left pending";
    EXPECT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1}) << mode;
  }
}


// Snapshots on failure: what Rescue writes is the state at Arm, though the next step's forward
// moved the buffers and drew from the generator since, and it may run on another thread (the
// stop-signal watcher's) while the training thread is blocked.
TEST(MemorySnapshotsTest, RescueWritesTheStateAtArmThoughTheNextForwardRanSince) {
  Snapshots snapshots(nullptr);
  Job job;
  const std::vector<torch::Tensor> at_arm = job.Values();
  snapshots->Arm(job.State());
  EXPECT_TRUE(snapshots->armed());
  job.optimizer.zero_grad();
  job.Forward();
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 1);
  EXPECT_FALSE(snapshots->armed());
  EXPECT_EQ(snapshots->Rescue(), -1) << "once";
  ASSERT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{1});
  ASSERT_TRUE(snapshots->Restore(1, job.State()).ok());
  ExpectEqualValues(job.Values(), at_arm);
}

// Arm keeps the state's listing and layout from the arming before (StateListing): a tensor that
// changed shape in place since (set_data keeps the tensor, not its shape) is laid out anew.
TEST(MemorySnapshotsTest, ATensorThatChangedShapeSinceTheArmingBeforeIsArmedInItsNewShape) {
  Snapshots snapshots(nullptr);
  Job job;
  snapshots->Arm(job.State());
  job.Step();
  torch::Tensor running_mean = job.model[1]->named_buffers()["running_mean"];
  running_mean.set_data(torch::arange(5.0));
  const std::vector<torch::Tensor> at_arm = job.Values();
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), 2);
  running_mean.fill_(7);
  ASSERT_TRUE(snapshots->Restore(2, job.State()).ok());
  ExpectEqualValues(job.Values(), at_arm);
}

// Parameters and a buffer that are strided views (every other column of a larger tensor): not
// plain host memory. They take the way a state on the GPU takes (MemorySnapshots::Arm): held, or
// copied at Arm, as tensors, and copied out by torch at Rescue after the armed step's mark.
struct StridedModule : torch::nn::Module {
  StridedModule() {
    torch::NoGradGuard no_grad;
    w = register_parameter("w", torch::randn({4, 16}).slice(1, 0, 16, 2));
    b = register_parameter("b", torch::randn({3, 8}).select(1, 5));
    seen = register_buffer("seen", torch::zeros({3, 6}).slice(1, 0, 6, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::NoGradGuard no_grad;
    seen.add_(1);  // as batch norm's statistics: changed by every forward, not by the optimizer
    return x;
  }
  torch::Tensor w, b, seen;
};

TEST(MemorySnapshotsTest, AStateOutsidePlainHostMemoryIsArmedAndRescuedAsItWasAtArm) {
  Snapshots snapshots(nullptr);
  torch::manual_seed(11);
  auto model = std::make_shared<StridedModule>();
  ASSERT_FALSE(model->w.is_non_overlapping_and_dense());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  Progress progress;
  const TrainState state{model.get(), &optimizer, nullptr, &progress};
  auto step = [&] {
    optimizer.zero_grad();
    model->forward(torch::ones({1}));
    (model->w.sum() + model->b.square().sum()).backward();
    optimizer.step();
    ++progress.global_step;
  };
  auto values = [&] {
    std::vector<torch::Tensor> out;
    for (const StateTensor& t : StateTensors(state)) out.push_back(t.tensor.detach().clone());
    return out;
  };
  step();
  const std::vector<torch::Tensor> at_arm = values();
  snapshots->Arm(state);
  ASSERT_TRUE(snapshots->armed()) << "a state outside plain host memory is armed too";
  model->forward(torch::ones({1}));  // the next step's forward moves the buffer
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 1);

  step();  // the job goes on past the rescued step; the restore takes it back
  ASSERT_TRUE(snapshots->Restore(1, state).ok());
  ExpectEqualValues(values(), at_arm);
}

// A rescued state was never compared across the replicas: it may take the slot of a snapshot the
// replicas have not agreed on either, or the older agreed one, never the newest agreed one.
TEST(MemorySnapshotsTest, RescueNeverWritesOverTheNewestAgreedSnapshot) {
  Snapshots snapshots(nullptr);
  Job job;
  ASSERT_TRUE(snapshots->Write(job.State()).ok());  // step 1
  snapshots->MarkAgreed(1);
  job.Step();
  ASSERT_TRUE(snapshots->Write(job.State()).ok());  // step 2, not compared yet
  job.Step();
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), 3);
  EXPECT_EQ(snapshots->UsableSteps(), (std::vector<int64_t>{3, 1}));
  snapshots->MarkAgreed(3);  // as after a restore that compared it
  job.Step();
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), 4);
  EXPECT_EQ(snapshots->UsableSteps(), (std::vector<int64_t>{4, 3}));
}

// A stop signal during the optimizer step finds nothing armed; the state the step makes is kept at
// the next Arm, before the process blocks in the step's vote. A state already held is not
// written again, and one that is not finite is not written at all.
TEST(MemorySnapshotsTest, ARescueAskedDuringTheOptimizerStepIsMadeAtTheNextArm) {
  Snapshots snapshots(nullptr);
  Job job;
  snapshots->Arm(job.State());
  snapshots->Disarm();
  EXPECT_EQ(snapshots->Rescue(), -1);
  job.Step();
  snapshots->Arm(job.State());
  EXPECT_FALSE(snapshots->armed()) << "written at once";
  EXPECT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{2});
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), -1) << "step 2 is held";

  job.Step();
  {
    torch::NoGradGuard no_grad;
    job.model->parameters()[0].view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  }
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), -1);
  EXPECT_EQ(snapshots->UsableSteps(), std::vector<int64_t>{2});
}

// A periodic snapshot copied alongside the next step (a state on the GPU, or this background mode)
// commits only in Finish, which a rank blocked in that step's collective never reaches. A rescue
// then finishes it: the armed step is kept, not the snapshot before it. Finish, if the training
// thread still gets there (a preemption warning, not a failure), leaves the slot as it is.
TEST(MemorySnapshotsTest, ARescueWhileTheArmedStepsSnapshotIsStillCopyingKeepsThatSnapshot) {
  Snapshots snapshots("background");
  Job job;
  ASSERT_TRUE(snapshots->Write(job.State()).ok());  // step 1: what the region held before
  snapshots->MarkAgreed(1);
  job.Step();
  const std::vector<torch::Tensor> at_arm = job.Values();
  snapshots->Arm(job.State());
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());  // step 2, copied while the next step runs
  job.optimizer.zero_grad();
  job.Forward();
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 2);
  EXPECT_NE(snapshots.HashOfStep(2), 0u) << "committed by the rescue";
  snapshots->Disarm();
  EXPECT_TRUE(snapshots->Finish());
  ASSERT_EQ(snapshots->UsableSteps(), (std::vector<int64_t>{2, 1}));
  ASSERT_TRUE(snapshots->Restore(2, job.State()).ok());
  ExpectEqualValues(job.Values(), at_arm);
}

// A lone rank on the GPU lets its snapshot stay pending across the next optimizer step (that step
// waits for the copies on the GPU), so the state armed after it is newer than the pending snapshot.
// Both are kept, the newer in the slot of the one not compared yet; Finish afterwards must not put
// that snapshot's header back over the newer state. (Copied between steps here: the copy is done
// before the optimizer step, as the GPU's ordering makes it there.)
TEST(MemorySnapshotsTest, ARescueKeepsThePendingSnapshotAndThenTheNewerArmedState) {
  Snapshots snapshots(nullptr);
  Job job;
  ASSERT_TRUE(snapshots->Write(job.State()).ok());  // step 1, agreed: never written over
  snapshots->MarkAgreed(1);
  job.Step();
  snapshots->Arm(job.State());
  ASSERT_TRUE(snapshots->Begin(job.State()).ok());  // step 2, pending until Finish
  snapshots->Disarm();
  job.Step();
  const std::vector<torch::Tensor> at_arm = job.Values();
  snapshots->Arm(job.State());  // step 3, while step 2's copy is pending
  int64_t written = -2;
  std::thread([&] { written = snapshots->Rescue(); }).join();
  EXPECT_EQ(written, 3);
  EXPECT_NE(snapshots.HashOfStep(3), 0u);
  EXPECT_EQ(snapshots.HashOfStep(2), 0u) << "step 3 took its slot";
  EXPECT_TRUE(snapshots->Finish());
  ASSERT_EQ(snapshots->UsableSteps(), (std::vector<int64_t>{3, 1})) << "the slot holds step 3's payload";
  ASSERT_TRUE(snapshots->Restore(3, job.State()).ok());
  ExpectEqualValues(job.Values(), at_arm);
}

// The stop-signal thread may rescue at any point of a trainer's step: while a background copy
// runs, between the disarm and the optimizer step, right after an Arm. Rescues from another thread
// all through 150 steps (periodic snapshots every third) never leave a slot that fails its
// checksum or holds another step's state: whatever steps are usable at the end restore exactly the
// state the job had after them.
TEST(MemorySnapshotsTest, RescuesFromAnotherThreadAtAnyPointLeaveEverySlotTrueToItsStep) {
  Snapshots snapshots("background");
  Job job;
  // A small rate keeps 150 steps finite: a state that is not finite is not rescued, and NaN != NaN.
  static_cast<torch::optim::SGDOptions&>(job.optimizer.param_groups()[0].options()).lr(0.001);
  std::map<int64_t, std::vector<torch::Tensor>> after_step;
  std::atomic<bool> done{false};
  std::thread stop_thread([&] {
    while (!done.load()) {
      snapshots->Rescue();  // how many find something to keep depends on the scheduler
      std::this_thread::yield();
    }
  });
  for (int i = 0; i < 150; ++i) {
    snapshots->Disarm();  // the trainer's FinishSnapshot, before the optimizer step
    snapshots->Finish();
    job.Step();  // this step's forward ran during the copy begun last time
    after_step[job.progress.global_step] = job.Values();
    snapshots->Arm(job.State());
    if (i % 3 == 0) {
      ASSERT_TRUE(snapshots->Begin(job.State()).ok());
    }
  }
  done = true;
  stop_thread.join();
  snapshots->Disarm();
  snapshots->Finish();
  for (const torch::Tensor& t : job.Values())
    ASSERT_TRUE(!t.is_floating_point() || torch::isfinite(t).all().item<bool>());
  const std::vector<int64_t> usable = snapshots->UsableSteps();
  ASSERT_EQ(usable.size(), 2u) << "a slot failed its checksum";
  for (int64_t step : usable) {
    ASSERT_TRUE(snapshots->Restore(step, job.State()).ok()) << step;
    ExpectEqualValues(job.Values(), after_step.at(step));
  }
}

// An infinity anywhere (here the last value of the last layer's weights) is refused as a NaN is.
TEST(MemorySnapshotsTest, ARescueRefusesAnInfinityAnywhereInTheState) {
  Snapshots snapshots(nullptr);
  Job job;
  {
    torch::NoGradGuard no_grad;
    torch::Tensor last = job.model->parameters()[4];
    last.view(-1)[last.numel() - 1] = -std::numeric_limits<float>::infinity();
  }
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), -1);
  EXPECT_TRUE(snapshots->UsableSteps().empty());
}

// The agent that stops this process hears that the write begins (it then waits for it rather than
// kill the process mid-way) and how it ended: `kept`, or `not_kept` for a state it refused.
TEST(MemorySnapshotsTest, ARescueSaysItIsKeepingAndThenWhetherItKept) {
  const std::string path = ::testing::TempDir() + "/reports-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  const int agent = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(agent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  auto received = [agent] {
    std::vector<std::string> got;
    char buf[600];
    for (ssize_t n; (n = ::recv(agent, buf, sizeof(buf), MSG_DONTWAIT)) > 0;) got.emplace_back(buf, n);
    return got;
  };
  const progress::ProgressClient reports(path);
  Snapshots snapshots(nullptr);
  snapshots->SetReports(&reports);
  Job job;
  snapshots->Arm(job.State());
  ASSERT_EQ(snapshots->Rescue(), 1);
  std::vector<std::string> got = received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rfind("keeping step=1 bytes=", 0), 0u) << got[0];
  EXPECT_EQ(got[1], "kept step=1");

  job.Step();
  {
    torch::NoGradGuard no_grad;
    job.model->parameters()[0].view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  }
  snapshots->Arm(job.State());
  EXPECT_EQ(snapshots->Rescue(), -1);
  got = received();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].rfind("keeping step=2 ", 0), 0u) << got[0];
  EXPECT_EQ(got[1], "not_kept step=2");
  ::close(agent);
  ::unlink(path.c_str());
}

// DTRUN_SNAPSHOT_ON_FAILURE=off: nothing is armed, and nothing is rescued.
TEST(MemorySnapshotsTest, WithSnapshotsOnFailureOffNothingIsArmed) {
  setenv(env::kSnapshotOnFailure, "off", 1);
  Snapshots snapshots(nullptr);
  unsetenv(env::kSnapshotOnFailure);
  Job job;
  snapshots->Arm(job.State());
  EXPECT_FALSE(snapshots->armed());
  EXPECT_EQ(snapshots->Rescue(), -1);
  EXPECT_TRUE(snapshots->UsableSteps().empty());
}

// After an elastic change (rank 3 of 4, then rank 1 of 2 on the same region) the snapshot the old
// world took is the state the new world restores: the ranks are replicas. With
// DTRUN_SNAPSHOT_PEERS=off it is not this rank's. A rescue of the restored step is not written
// again, and a later one leaves the restored (agreed) state's slot alone.
TEST(MemorySnapshotsTest, ASnapshotTakenInAnotherWorldSizeIsRestoredUnlessPeersAreOff) {
  Snapshots old_world(nullptr, RankOf(3, 4));
  Job job;
  ASSERT_TRUE(old_world->Write(job.State()).ok());  // step 1
  const std::vector<torch::Tensor> at_step_1 = job.Values();
  setenv(env::kSnapshotPeers, "off", 1);
  {
    Snapshots own_only(nullptr, RankOf(1, 2), &old_world);
    EXPECT_TRUE(own_only->UsableSteps().empty());
  }
  unsetenv(env::kSnapshotPeers);
  Snapshots new_world(nullptr, RankOf(1, 2), &old_world);
  ASSERT_EQ(new_world->UsableSteps(), std::vector<int64_t>{1});
  Job fresh;
  fresh.Step();
  ASSERT_TRUE(new_world->Restore(1, fresh.State()).ok());
  ExpectEqualValues(fresh.Values(), at_step_1);
  EXPECT_EQ(fresh.progress.global_step, 1);
  EXPECT_EQ(new_world->restored_world_size(), 4);
  new_world->MarkAgreed(1);
  new_world->Arm(fresh.State());
  EXPECT_EQ(new_world->Rescue(), -1) << "step 1 is held, taken by the old world";
  fresh.Step();
  new_world->Arm(fresh.State());
  EXPECT_EQ(new_world->Rescue(), 2);
  fresh.Step();
  new_world->Arm(fresh.State());
  EXPECT_EQ(new_world->Rescue(), 3);
  EXPECT_EQ(new_world->UsableSteps(), (std::vector<int64_t>{3, 1}));
  new_world->DiscardAllBut(1);
  EXPECT_EQ(new_world->UsableSteps(), std::vector<int64_t>{1}) << "the restored state stays";
}

// A rank that received another rank's copy keeps it as its own snapshot of that step; a copy that
// does not match its checksum leaves the slot empty.
TEST(MemorySnapshotsTest, AnAdoptedPeerCopyIsThisRanksOwnSnapshotOfItsStep) {
  Snapshots sender(nullptr, RankOf(0, 2));
  Job job;
  ASSERT_TRUE(sender->Write(job.State()).ok());  // step 1
  uint64_t hash = 0;
  absl::StatusOr<absl::string_view> payload = sender->Payload(1, &hash);
  ASSERT_TRUE(payload.ok()) << payload.status();
  setenv(env::kSnapshotPeers, "off", 1);  // only its own rank's count: the adopted one is
  Snapshots receiver(nullptr, RankOf(1, 2));
  unsetenv(env::kSnapshotPeers);
  EXPECT_EQ(receiver->Adopt(1, *payload, hash ^ 1).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(receiver->UsableSteps().empty());
  ASSERT_TRUE(receiver->Adopt(1, *payload, hash).ok());
  ASSERT_EQ(receiver->UsableSteps(), std::vector<int64_t>{1});
  Job fresh;
  fresh.Step();
  ASSERT_TRUE(receiver->Restore(1, fresh.State()).ok());
  ExpectEqualValues(fresh.Values(), job.Values());
}

// A payload rebuilt with the records `edit` keeps (it may rename them), as another dtrun's might be.
std::string Rebuilt(absl::string_view payload, const std::function<bool(snapshot::TensorRecord&)>& edit) {
  absl::StatusOr<std::vector<snapshot::TensorRecord>> toc = snapshot::DecodeToc(payload);
  EXPECT_TRUE(toc.ok()) << toc.status();
  std::vector<snapshot::TensorRecord> kept;
  std::vector<uint64_t> from;
  for (snapshot::TensorRecord r : *toc) {
    const uint64_t at = r.offset;
    if (!edit(r)) continue;
    kept.push_back(r);
    from.push_back(at);
  }
  std::string bytes(snapshot::LayOut(kept), '\0');
  const std::string head = snapshot::EncodeToc(kept);
  bytes.replace(0, head.size(), head);
  for (size_t i = 0; i < kept.size(); ++i) {
    std::memcpy(&bytes[kept[i].offset], payload.data() + from[i], kept[i].nbytes);
  }
  return bytes;
}

// A snapshot an older dtrun took has no progress/global_batch: it restores and leaves the
// trainer's own value. A tensor this trainer does not know is refused, naming the count.
TEST(MemorySnapshotsTest, AnOptionalTensorMayBeMissingButAnUnknownOneIsRefused) {
  Snapshots snapshots(nullptr);
  Job job;
  job.progress.global_batch = 64;
  ASSERT_TRUE(snapshots->Write(job.State()).ok());  // step 1
  uint64_t hash = 0;
  absl::StatusOr<absl::string_view> payload = snapshots->Payload(1, &hash);
  ASSERT_TRUE(payload.ok()) << payload.status();
  const std::string older =
      Rebuilt(*payload, [](snapshot::TensorRecord& r) { return r.name != "progress/global_batch"; });
  const std::string newer = Rebuilt(*payload, [](snapshot::TensorRecord& r) {
    if (r.name == "progress/global_batch") r.name = "progress/from_a_later_dtrun";
    return true;
  });

  Job fresh;
  fresh.Step();
  fresh.Step();
  fresh.progress.global_batch = 96;
  ASSERT_TRUE(snapshots->RestorePayload(older, fresh.State()).ok());
  EXPECT_EQ(fresh.progress.global_step, 1);
  EXPECT_EQ(fresh.progress.global_batch, 96) << "not in the snapshot: the trainer's own";
  for (size_t i = 0; i < job.model->parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(fresh.model->parameters()[i], job.model->parameters()[i])) << "parameter " << i;
  }
  ASSERT_TRUE(snapshots->RestorePayload(*payload, fresh.State()).ok());
  EXPECT_EQ(fresh.progress.global_batch, 64);

  absl::Status refused = snapshots->RestorePayload(newer, fresh.State());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("1 of them unknown to this trainer"), absl::string_view::npos) << refused;
}

}  // namespace
}  // namespace dtrun::worker

// Buddy copies (docs/DESIGN.md, "Buddy copies"): the agent's component that copies this node's
// snapshots to its buddy (the node of the next group rank) and, at a round start, fetches the
// copies of ranks this node took over without holding their snapshots.
//
// Which snapshots travel: those whose step crosses a multiple of `every` since the rank's previous
// snapshot, as the worker reported them (its `restored` and `snapshot` reports, in order). The ranks
// of a job snapshot the same steps, so every node pins exactly the same steps in its replica region
// (the newest two: the worker's own region keeps changing), or none where the worker overwrote the
// step before it was copied: never another step, which no other rank would hold. The decision is
// not taken from the region itself, which a reader may find mid-write with one slot empty. Each node
// pushes the newest pinned copy to the buddy in chunks, paced to a duty cycle so that
// replication lags rather than slows training; a push that fails goes again after a backoff.
// While a push keeps up (it ends before the next boundary but one), the buddy's newest copy is
// one that every surviving node still has pinned, so a restore finds a step every rank holds;
// otherwise the job falls back to disk, and says so.
// The event loop never waits on the network: pinning, pushing and fetching run on threads of
// their own, and a fetch's end is an event on event_fd().
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "agent/snapshot_store.h"
#include "base/checked_mutex.h"
#include "base/unique_fd.h"
#include "rendezvous/rendezvous_state.h"
#include "replica/replica_keeper.h"
#include "replica/replica_transport.h"
#include "replica/send_pacer.h"
#include "snapshot/peer_restores.h"

namespace dtrun {

struct BuddyReplication {
  std::shared_ptr<replica::ReplicaKeeper> keeper;  // copies kept for other nodes
  std::unique_ptr<replica::ReplicaServer> server;  // serving `keeper`
  // Opens a channel to a buddy's replica endpoint.
  std::function<std::unique_ptr<replica::BuddyChannel>(const std::string& host, int port)> connect;
  int every = 10;        // copy the snapshots that cross a multiple of this many steps
  std::string failure_domain;  // this node's (--failure-domain; "": none said)
  // The share of wall time the sender may spend sending (it also runs at a low priority).
  double duty = 0.25;
  std::chrono::milliseconds fetch_timeout{30000};
  // A push that failed goes again after this, doubling up to 30 s.
  std::chrono::milliseconds first_retry{1000};
};

class Replicator {
 public:
  Replicator(BuddyReplication replication, const SnapshotStore& store, uint64_t job);
  ~Replicator();

  // Readable when a fetch has finished (Drain clears it).
  int event_fd() const { return event_fd_.get(); }
  void Drain();
  // Whether the workers of `a` may start now. Starts fetching (once per round) the buddy's copies
  // of the ranks for which this node holds no snapshot, and says false until that fetch is done.
  bool ReadyFor(const rdzv::Assignment& a);
  // A worker's reports, in the order it sent them: what it restored (-1: nothing) and each
  // snapshot it completed. A snapshot crossing a boundary is pinned.
  void OnRestored(int local_rank, int64_t step);
  void OnSnapshot(int local_rank, int64_t step);
  // What the last fetch did, one line per rank (for the console and the event log); taken once.
  std::vector<std::string> TakeFetchNotes();
  // For `dtrun status`: the buddy of this round ("host:port"; "" for none) and, by local rank,
  // the newest step it confirmed holding (-1: none yet).
  struct BuddyView {
    std::string endpoint;
    std::vector<int64_t> kept_steps;
  };
  BuddyView View() const;

 private:
  struct Round {
    int64_t round = -1;
    int rank_offset = 0;
    int world_size = 0;
    std::string buddy_host;
    int buddy_port = 0;
    // Where a fetch looks, in turn: where this node's ranks' copies were sent in the last rounds,
    // then the buddy.
    std::vector<rdzv::ReplicaEndpoint> sources;
  };
  static Round RoundOf(const rdzv::Assignment& a);
  // Says where this node's copies go when that changes: with failure domains, whether they leave
  // this node's domain.
  void SayBuddy(const rdzv::Assignment& a) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `*due` is set (and clears it) or stopping (nullopt); the round and channel then.
  std::optional<std::pair<Round, std::shared_ptr<replica::BuddyChannel>>> AwaitWork(bool* due);
  void PinLoop();
  void PushLoop();
  // Copies the snapshot the rank's reports marked for pinning into its replica region, if the
  // worker's region still holds it. True if it did.
  bool Pin(int local_rank, const Round& round);
  // Sends the rank's newest pinned copy if the buddy lacks it. False if it did not get there.
  bool Push(int local_rank, const Round& round, replica::BuddyChannel* channel);
  // After a failed push: waits `backoff` (less if a newer pin comes), marks a push due, and
  // returns the next backoff.
  std::chrono::milliseconds RetryLater(std::chrono::milliseconds backoff);
  void Fetch(Round round, std::vector<int> local_ranks, std::shared_ptr<replica::BuddyChannel> buddy);
  // Fetches what `from` holds of each rank in `wanted` into its replica region; the ranks it had
  // nothing for stay in `wanted`, with why in `misses` (by local rank). A source that fails a call
  // (unreachable, cancelled) is not asked for the other ranks.
  void FetchFrom(const Round& round, const std::string& from, replica::BuddyChannel& channel, std::vector<int>& wanted,
                 std::vector<std::string>& notes, std::vector<std::string>& misses);
  // The channel of the fetch's next source, unless the fetch was cancelled (null then).
  std::shared_ptr<replica::BuddyChannel> FetchChannel(const Round& round, const rdzv::ReplicaEndpoint& source,
                                                      const std::shared_ptr<replica::BuddyChannel>& buddy);
  // Whether the rank's regions hold a snapshot it may restore (snapshot/peer_restores.h): with
  // peers on, any of the job's, in any world size: a node whose world grew or shrank restores the
  // state it holds rather than fetch what its buddy keeps per (rank, world size).
  bool HoldsSnapshot(int local_rank, int64_t rank, int64_t world_size) const;
  std::shared_ptr<replica::BuddyChannel> ChannelFor(const Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the fetch in flight at once: cancels the channel it is reading (a cancelled channel stays
  // so: the buddy's is forgotten, and the next round that needs it opens another).
  void CancelFetch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::string BuddyEndpoint(const std::string& host, int port);  // "" for no buddy
  bool PauseFor(std::chrono::duration<double> pause);  // the duty cycle's pause; false when stopping

  static constexpr std::chrono::milliseconds kLastRetry{30000};

  BuddyReplication r_;
  const SnapshotStore& store_;
  const uint64_t job_;
  const bool peers_ = snapshot::PeerRestoresAllowed();  // which held snapshots spare a rank the fetch
  UniqueFd event_fd_;

  mutable CheckedMutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;       // a worker wrote a snapshot
  bool push_due_ ABSL_GUARDED_BY(mu_) = false;    // a pin is newer than what the buddy has
  Round round_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<replica::BuddyChannel> channel_ ABSL_GUARDED_BY(mu_);
  std::string channel_endpoint_ ABSL_GUARDED_BY(mu_);
  int64_t fetched_round_ ABSL_GUARDED_BY(mu_) = -1;  // fetch done (or not needed) for this round
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  bool fetch_cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<replica::BuddyChannel> fetch_channel_ ABSL_GUARDED_BY(mu_);  // the source being read
  std::string channel_endpoint_of_fetch_ ABSL_GUARDED_BY(mu_);                 // its "host:port"
  std::vector<std::string> fetch_notes_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> pinned_ ABSL_GUARDED_BY(mu_);  // by local rank: the newest pinned step
  std::vector<int64_t> reported_ ABSL_GUARDED_BY(mu_);  // by local rank: the last step reported this round
  std::vector<int64_t> to_pin_ ABSL_GUARDED_BY(mu_);    // by local rank: a crossing step not yet pinned (-1)
  std::vector<int64_t> pushed_ ABSL_GUARDED_BY(mu_);  // by local rank: the newest step pushed (or tried)
  std::vector<int> pushing_ ABSL_GUARDED_BY(mu_);     // by local rank: the replica slot being pushed (-1)
  std::vector<int64_t> kept_ ABSL_GUARDED_BY(mu_);    // by local rank: the newest step the buddy confirmed
  std::set<int64_t> confirmed_ ABSL_GUARDED_BY(mu_);  // ranks whose first copy reached the buddy (said once)
  CheckedMutex regions_mu_;  // one writer of replica regions at a time (pin, fetch)
  // By local rank, mapped once at construction (null where a region could not be mapped). The
  // worker regions are read by the pinner only; the replica regions written under regions_mu_.
  std::vector<std::unique_ptr<snapshot::MappedRegion>> worker_maps_;
  // Shared: gRPC reads a copy in place and may hold its last chunks after the push has ended.
  std::vector<std::shared_ptr<snapshot::MappedRegion>> replica_maps_;
  std::vector<int64_t> failed_step_;  // the sender thread's own: by local rank, the last step that failed
  replica::SendPacer pacer_;          // the sender thread's own
  std::chrono::steady_clock::time_point resume_at_;  // the sender thread's own: when the next copy may start
  std::thread pinner_;
  std::thread pusher_;
  std::thread fetcher_;
};

}  // namespace dtrun

// The key-value core of a c10d TCPStore server, without sockets: it consumes the bytes each client
// sends and queues the bytes to send back. Speaks the wire protocol of LibTorch 1.13 and 2.x
// clients (2.2+ announces itself with a VALIDATE message; see docs/DESIGN.md). Not thread-safe:
// the server drives it from one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace dtrun {

using StoreClientId = uint64_t;

// How a client numbers its requests, learnt from what it sends: VALIDATE first (2.2+), else the
// 1.13/2.0 numbering until a request only the 2.1 nightlies' numbering has (codes 9-11, or 7 after
// other requests: 1.13 and 2.0 send WATCH_KEY only on their callback connection).
enum class StoreNumbering { kUnknown, kTorch20, kTorch21Nightly, kValidated };

class StoreCore {
 public:
  // The largest request (key, values and framing) a client may send: larger ones close it.
  // LibTorch's own server has no limit; 64 MiB is far above what process groups store.
  static constexpr uint64_t kMaxRequestBytes = 64ull << 20;
  // Unfinished input of all clients together.
  static constexpr uint64_t kMaxBufferedBytes = 256ull << 20;
  // Replies a client has not read (queued here or held unsent by the server): at this much its
  // further requests wait unrun in its input (a client that pipelines GETs of a large value and
  // never reads cannot make the store hold more than this plus one reply). And the same for all
  // clients together: past it, every client's requests wait until replies are read or the server
  // closes the clients that do not read.
  static constexpr uint64_t kMaxClientBacklogBytes = 64ull << 20;
  static constexpr uint64_t kMaxBacklogBytes = 256ull << 20;
  // What every client's pending WAITs and BARRIERs hold, counting each awaited key as its bytes
  // plus kWaitOverheadBytes (its place in the key's line and in the client's): a WAIT past it
  // closes its client. A job of 80,000 workers each awaiting a key holds ~13 MB.
  static constexpr uint64_t kMaxWaitBytes = 256ull << 20;
  static constexpr uint64_t kWaitOverheadBytes = 160;

  explicit StoreCore(uint64_t max_wait_bytes = kMaxWaitBytes) : max_wait_bytes_(max_wait_bytes) {}

  // Appends `data` from `client` and executes every complete request in it. Returns false on a
  // protocol violation; the caller then closes the connection (and calls OnDisconnect).
  bool OnData(StoreClientId client, absl::string_view data);
  void OnDisconnect(StoreClientId client);

  // Moves out the bytes queued for `client` (responses and wake-ups). A value in them shares the
  // stored value's memory: many clients reading one large value cost no copies of it.
  absl::Cord TakeOutput(StoreClientId client);
  // The server still holds `bytes` of `client`'s replies unsent (its socket did not take them).
  void SetUnsent(StoreClientId client, size_t bytes);
  // Whether `client`'s requests wait for replies to be read (the server stops reading it then).
  bool Waiting(StoreClientId client) const;
  // Runs the requests of clients that no longer wait; returns those that broke the protocol (to
  // close). Their output shows in TakeClientsWithOutput.
  std::vector<StoreClientId> RunUnblocked();
  // Whether some client's complete requests wait unrun.
  bool holds_requests() const { return !held_.empty(); }
  // Whether some of those clients no longer wait: RunUnblocked would run their requests.
  bool CanRunHeld() const;
  uint64_t backlog() const { return backlog_; }
  // Why the last OnData or RunUnblocked that failed did ("" if it was not said).
  const std::string& last_error() const { return last_error_; }
  // Clients that have queued output since the last call; clears the set.
  std::vector<StoreClientId> TakeClientsWithOutput();

  size_t num_keys() const { return kv_.size(); }

 private:
  struct Client {
    StoreNumbering numbering = StoreNumbering::kUnknown;
    bool ran_other_than_watch = false;  // has run a request other than WATCH_KEY
    std::string in;
    absl::Cord out;
    size_t unsent = 0;        // replies the server took but could not send yet
    size_t keys_awaited = 0;  // > 0 while a WAIT is pending
    // Where this client stands in waiters_ for each key of its pending WAIT (some perhaps set
    // already): a disconnect leaves those lines without a scan of every waiter.
    std::vector<std::pair<std::string, uint64_t>> waits;
    uint64_t wait_bytes = 0;  // what `waits` counts against max_wait_bytes_
  };
  class Reader;

  // Runs every complete request buffered for `c` while it does not wait; false on a protocol error.
  bool RunComplete(StoreClientId id, Client& c);
  bool Waits(const Client& c) const;
  // Parses and runs one request at the head of `input`; returns bytes consumed, 0 if the request
  // is incomplete, or -1 on a protocol error.
  long RunOne(StoreClientId id, Client& c, absl::string_view input);
  bool Execute(StoreClientId id, Client& c, int op, Reader& r);
  void Set(const std::string& key, absl::Cord value);
  void StartWait(StoreClientId id, Client& c, std::vector<std::string> keys);
  // Puts `id` in line for `key` (its pending WAIT or BARRIER awaits it). Past max_wait_bytes_:
  // false, and the request is refused (refused_).
  bool AwaitKey(StoreClientId id, Client& c, const std::string& key);
  void ClearWaits(Client& c);
  // One awaited key of `waiter` arrived: answers STOP_WAITING when it was the last.
  void KeyArrived(StoreClientId waiter);
  // ADD's and BARRIER's counter: the key's value as a number, 0 if it has none or another.
  int64_t CounterAt(const std::string& key) const;
  // A key is there for CHECK and WAIT when it has a value or a non-empty queue.
  bool Present(const std::string& key) const;
  // A queue got an item: the first client waiting on `key` is woken (one item, one waiter).
  void WakeOne(const std::string& key);
  void CancelWait(Client& c);
  void Reply(StoreClientId id, Client& c, absl::string_view bytes);
  void ReplyValue(StoreClientId id, Client& c, const absl::Cord& value);  // length-prefixed

  std::unordered_map<std::string, absl::Cord> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;  // QUEUE_PUSH/POP (2.x)
  // The clients awaiting each key, by arrival (QUEUE_POP's waiters get items in that order).
  std::unordered_map<std::string, std::map<uint64_t, StoreClientId>> waiters_;
  uint64_t arrivals_ = 0;
  const uint64_t max_wait_bytes_;
  uint64_t wait_bytes_ = 0;  // sum of clients_[*].wait_bytes
  std::map<StoreClientId, Client> clients_;
  std::set<StoreClientId> pending_output_;
  uint64_t buffered_ = 0;  // sum of clients_[*].in sizes
  uint64_t backlog_ = 0;   // sum of clients_[*].out and .unsent sizes
  std::set<StoreClientId> held_;  // clients whose requests wait for their replies to be read
  std::string last_error_;
  bool refused_ = false;  // the request being run went past a limit: its client is closed
};

}  // namespace dtrun

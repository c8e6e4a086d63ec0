#include "agent/store_core.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dtrun {
namespace {

// Requests by meaning, numbered three ways on the wire (docs/DESIGN.md, "The store's numberings"):
//  - LibTorch 1.13 and 2.0 send no VALIDATE and number SET=0 .. GETNUMKEYS=6, WATCH_KEY=7,
//    DELETE_KEY=8 (measured with Debian's 1.13; APPEND and the rest came in May 2023).
//  - PyTorch main from July to August 2023 (2.1 nightlies) dropped WATCH_KEY but did not send
//    VALIDATE yet: DELETE_KEY=7, APPEND=8, MULTI_GET=9, MULTI_SET=10, CANCEL_WAIT=11. Codes 9-11
//    exist only there, so the first of them moves its connection to this numbering; so does a 7
//    after other requests (the older clients send WATCH_KEY only on a connection of its own).
//  - Clients that open with VALIDATE (2.2 at the latest) number VALIDATE=0, SET=1, … without
//    WATCH_KEY, then PING and the newest clients' queue, list and barrier requests (numbered in the
//    order PyTorch's libuv backend dispatches them, PING's place included).
enum Op {
  kValidate, kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kGetNumKeys, kWatchKey, kDeleteKey,
  kAppend, kMultiGet, kMultiSet, kCancelWait, kPing, kQueuePush, kQueuePop, kQueueLen, kListKeys,
  kBarrier, kInvalid,
};
constexpr Op kTorch20Ops[] = {kSet, kCompareSet, kGet, kAdd, kCheck, kWait, kGetNumKeys, kWatchKey, kDeleteKey};
constexpr Op kTorch21NightlyOps[] = {kSet,       kCompareSet, kGet,    kAdd,      kCheck,    kWait,
                                     kGetNumKeys, kDeleteKey, kAppend, kMultiGet, kMultiSet, kCancelWait};
constexpr Op kValidatedOps[] = {kValidate, kSet,       kCompareSet, kGet,      kAdd,     kCheck,   kWait,
                                kGetNumKeys, kDeleteKey, kAppend,     kMultiGet, kMultiSet, kCancelWait,
                                kPing,     kQueuePush, kQueuePop,   kQueueLen, kListKeys, kBarrier};
constexpr uint32_t kValidationMagic = 0x3C85F7CE;
// Every length a client claims is checked against what it has sent and against these limits
// before anything is allocated; a request beyond them closes the connection.
constexpr uint8_t kCheckReady = 0, kCheckNotReady = 1;
constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;
constexpr uint8_t kWatchRegistered = 3;

template <size_t N>
Op Lookup(const Op (&ops)[N], uint8_t code) {
  return code < N ? ops[code] : kInvalid;
}

Op OpFor(StoreNumbering numbering, uint8_t code) {
  switch (numbering) {
    case StoreNumbering::kTorch20: return Lookup(kTorch20Ops, code);
    case StoreNumbering::kTorch21Nightly: return Lookup(kTorch21NightlyOps, code);
    case StoreNumbering::kValidated: return Lookup(kValidatedOps, code);
    case StoreNumbering::kUnknown: break;
  }
  return kInvalid;
}

const char* NumberingName(StoreNumbering numbering) {
  switch (numbering) {
    case StoreNumbering::kTorch20: return "LibTorch 1.13-2.0 clients send (no VALIDATE)";
    case StoreNumbering::kTorch21Nightly: return "2.1 nightly clients send (no VALIDATE, no WATCH_KEY)";
    case StoreNumbering::kValidated: return "LibTorch 2.2+ clients send (after VALIDATE)";
    case StoreNumbering::kUnknown: break;
  }
  return "any client sends";
}

template <typename T>
std::string Raw(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}
std::string Bytes(absl::string_view s) { return Raw<uint64_t>(s.size()) + std::string(s); }

}  // namespace

// Reads little-endian fields; every getter returns false when the buffer is too short.
class StoreCore::Reader {
 public:
  explicit Reader(absl::string_view buf) : buf_(buf) {}
  template <typename T>
  bool Get(T* out) {
    if (buf_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(out, buf_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Str(std::string* out) {
    uint64_t len = 0;
    if (!Get(&len)) return false;
    if (len > StoreCore::kMaxRequestBytes) {
      too_large_ = true;
      return false;
    }
    if (buf_.size() - pos_ < len) return false;
    out->assign(buf_.data() + pos_, len);
    pos_ += len;
    return true;
  }
  // `n` length-prefixed strings: each takes at least 8 bytes, so a count the received bytes cannot
  // hold waits for more (up to the request limit) instead of allocating n empty strings.
  bool Strs(uint64_t n, std::vector<std::string>* out) { return Count(n, 8) && (out->resize(n), AllStr(out)); }
  bool Count(uint64_t n, uint64_t min_bytes_each) {
    if (n > StoreCore::kMaxRequestBytes / min_bytes_each) {
      too_large_ = true;
      return false;
    }
    return n * min_bytes_each <= buf_.size() - pos_;
  }
  bool AllStr(std::vector<std::string>* out) {
    for (auto& s : *out) {
      if (!Str(&s)) return false;
    }
    return true;
  }
  size_t pos() const { return pos_; }
  bool too_large() const { return too_large_; }

 private:
  absl::string_view buf_;
  size_t pos_ = 0;
  bool too_large_ = false;
};

bool StoreCore::OnData(StoreClientId id, absl::string_view data) {
  last_error_.clear();
  // All clients' unfinished input together is bounded: the client that would go beyond it goes.
  if (buffered_ + data.size() > kMaxBufferedBytes) {
    last_error_ = "the clients' unfinished input would pass 256 MiB";
    return false;
  }
  Client& c = clients_[id];
  const size_t before = c.in.size();
  c.in.append(data.data(), data.size());
  const bool ok = RunComplete(id, c);
  buffered_ = buffered_ - before + c.in.size();
  if (!ok && last_error_.empty()) last_error_ = "a malformed request";
  // An incomplete request never grows past the limit: the next bytes would only make it larger.
  if (ok && c.in.size() > kMaxRequestBytes) {
    last_error_ = "a request larger than 64 MiB";
    return false;
  }
  return ok;
}

bool StoreCore::Waits(const Client& c) const {
  return c.out.size() + c.unsent >= kMaxClientBacklogBytes || backlog_ >= kMaxBacklogBytes;
}

bool StoreCore::Waiting(StoreClientId id) const {
  auto it = clients_.find(id);
  return it != clients_.end() && Waits(it->second);
}

bool StoreCore::CanRunHeld() const {
  return std::any_of(held_.begin(), held_.end(), [this](StoreClientId id) { return !Waiting(id); });
}

std::vector<StoreClientId> StoreCore::RunUnblocked() {
  std::vector<StoreClientId> broken;
  const std::vector<StoreClientId> held(held_.begin(), held_.end());
  for (StoreClientId id : held) {
    Client& c = clients_[id];
    if (Waits(c)) continue;
    const size_t before = c.in.size();
    last_error_.clear();
    const bool ok = RunComplete(id, c);
    buffered_ = buffered_ - before + c.in.size();
    if (!ok) {
      if (last_error_.empty()) last_error_ = "a malformed request";
      broken.push_back(id);
    }
  }
  return broken;
}

void StoreCore::SetUnsent(StoreClientId id, size_t bytes) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  backlog_ = backlog_ - it->second.unsent + bytes;
  it->second.unsent = bytes;
}

bool StoreCore::RunComplete(StoreClientId id, Client& c) {
  size_t consumed = 0;
  while (consumed < c.in.size() && !Waits(c)) {
    long n = RunOne(id, c, absl::string_view(c.in).substr(consumed));
    if (n < 0) return false;
    if (n == 0) break;
    consumed += static_cast<size_t>(n);
  }
  c.in.erase(0, consumed);
  // Stopped with input left: whether a complete request waits is found when it runs.
  if (!c.in.empty() && Waits(c)) {
    held_.insert(id);
  } else {
    held_.erase(id);
  }
  return true;
}

long StoreCore::RunOne(StoreClientId id, Client& c, absl::string_view input) {
  Reader r(input);
  uint8_t code = 0;
  if (!r.Get(&code)) return 0;
  if (c.numbering == StoreNumbering::kUnknown) {
    // A 2.2+ client opens with VALIDATE(0) + magic; an older client's first byte 0 is SET,
    // followed by an 8-byte key length that never equals the magic in its low half.
    uint32_t magic = 0;
    if (code == 0 && !r.Get(&magic)) return 0;
    c.numbering = (code == 0 && magic == kValidationMagic) ? StoreNumbering::kValidated : StoreNumbering::kTorch20;
    if (c.numbering == StoreNumbering::kValidated) return static_cast<long>(r.pos());
    r = Reader(input);
    r.Get(&code);
  }
  if (c.numbering == StoreNumbering::kTorch20 && code >= std::size(kTorch20Ops) && code < std::size(kTorch21NightlyOps)) {
    c.numbering = StoreNumbering::kTorch21Nightly;
  }
  // 1.13 and 2.0 send WATCH_KEY only on a connection of its own (their callback client), which
  // sends nothing else; so 7 after any other request is the 2.1 nightlies' DELETE_KEY.
  if (c.numbering == StoreNumbering::kTorch20 && code == 7 && c.ran_other_than_watch) {
    c.numbering = StoreNumbering::kTorch21Nightly;
  }
  Op op = OpFor(c.numbering, code);
  if (op == kInvalid) {
    last_error_ = absl::StrCat("request type ", static_cast<int>(code), " is not one ", NumberingName(c.numbering),
                               "; this store serves SET through BARRIER");
    return -1;
  }
  if (!Execute(id, c, op, r)) {
    if (r.too_large()) last_error_ = "a request claimed more bytes than a request may have (64 MiB)";
    return r.too_large() ? -1 : 0;
  }
  if (std::exchange(refused_, false)) return -1;  // complete, and past a limit: last_error_ says which
  if (op != kWatchKey) c.ran_other_than_watch = true;
  return static_cast<long>(r.pos());
}

// Returns false if the request is not complete yet (nothing has been changed then).
bool StoreCore::Execute(StoreClientId id, Client& c, int op, Reader& r) {
  std::string key, value, expected;
  uint64_t n = 0;
  std::vector<std::string> keys;
  switch (static_cast<Op>(op)) {
    case kValidate: {
      uint32_t magic = 0;
      if (!r.Get(&magic)) return false;
      return true;
    }
    case kSet:
      if (!r.Str(&key) || !r.Str(&value)) return false;
      Set(key, absl::Cord(std::move(value)));
      return true;
    case kCompareSet: {
      if (!r.Str(&key) || !r.Str(&expected) || !r.Str(&value)) return false;
      auto it = kv_.find(key);
      if (it == kv_.end()) {
        if (expected.empty()) {
          Set(key, absl::Cord(std::move(value)));
          ReplyValue(id, c, kv_[key]);
        } else {
          ReplyValue(id, c, absl::Cord(std::move(expected)));
        }
      } else {
        if (it->second == expected) it->second = absl::Cord(std::move(value));
        ReplyValue(id, c, it->second);
      }
      return true;
    }
    case kGet: {
      if (!r.Str(&key)) return false;
      auto it = kv_.find(key);
      ReplyValue(id, c, it == kv_.end() ? absl::Cord() : it->second);
      return true;
    }
    case kAdd: {
      int64_t delta = 0;
      if (!r.Str(&key) || !r.Get(&delta)) return false;
      int64_t current = CounterAt(key);
      // Wraps like LibTorch's server does, without signed overflow (a hostile delta is just a number).
      current = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
      Set(key, absl::Cord(absl::StrCat(current)));
      Reply(id, c, Raw<int64_t>(current));
      return true;
    }
    case kCheck: {
      if (!r.Get(&n) || !r.Strs(n, &keys)) return false;
      bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return Present(k); });
      Reply(id, c, Raw<uint8_t>(all ? kCheckReady : kCheckNotReady));
      return true;
    }
    case kWait:
      if (!r.Get(&n) || !r.Strs(n, &keys)) return false;
      StartWait(id, c, std::move(keys));
      return true;
    case kGetNumKeys:
      Reply(id, c, Raw<int64_t>(static_cast<int64_t>(kv_.size())));
      return true;
    case kWatchKey:
      // Watch callbacks are not used by process-group init; acknowledge so clients proceed.
      if (!r.Str(&key)) return false;
      Reply(id, c, Raw<uint8_t>(kWatchRegistered));
      return true;
    case kDeleteKey:
      if (!r.Str(&key)) return false;
      Reply(id, c, Raw<int64_t>(static_cast<int64_t>(kv_.erase(key))));
      return true;
    case kAppend: {
      if (!r.Str(&key) || !r.Str(&value)) return false;
      auto it = kv_.find(key);
      absl::Cord appended = it == kv_.end() ? absl::Cord() : it->second;
      appended.Append(std::move(value));
      Set(key, std::move(appended));
      return true;
    }
    case kMultiGet: {
      if (!r.Get(&n) || !r.Strs(n, &keys)) return false;
      for (const std::string& k : keys) {
        auto it = kv_.find(k);
        ReplyValue(id, c, it == kv_.end() ? absl::Cord() : it->second);
      }
      return true;
    }
    case kMultiSet: {
      if (!r.Get(&n) || !r.Count(n, 16)) return false;
      std::vector<std::pair<std::string, std::string>> pairs(n);
      for (auto& [k, v] : pairs) {
        if (!r.Str(&k) || !r.Str(&v)) return false;
      }
      for (auto& [k, v] : pairs) Set(k, absl::Cord(std::move(v)));
      return true;
    }
    case kCancelWait:
      CancelWait(c);
      Reply(id, c, Raw<uint8_t>(kWaitCanceled));
      return true;
    case kPing: {
      uint32_t nonce = 0;
      if (!r.Get(&nonce)) return false;
      Reply(id, c, Raw<uint32_t>(nonce));
      return true;
    }
    case kQueuePush:
      if (!r.Str(&key) || !r.Str(&value)) return false;
      queues_[key].push_back(std::move(value));
      WakeOne(key);
      return true;
    case kQueuePop: {
      if (!r.Str(&key)) return false;
      auto it = queues_.find(key);
      const size_t size = it == queues_.end() ? 0 : it->second.size();
      std::string out = Raw<int64_t>(static_cast<int64_t>(size));
      if (size > 0) {
        out += Bytes(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) queues_.erase(it);
      }
      Reply(id, c, out);
      return true;
    }
    case kQueueLen: {
      if (!r.Str(&key)) return false;
      auto it = queues_.find(key);
      Reply(id, c, Raw<int64_t>(it == queues_.end() ? 0 : static_cast<int64_t>(it->second.size())));
      return true;
    }
    case kListKeys: {
      std::string out = Raw<int64_t>(static_cast<int64_t>(kv_.size()));
      for (const auto& [k, v] : kv_) out += Bytes(k);
      Reply(id, c, out);
      return true;
    }
    case kBarrier: {
      int64_t world_size = 0;
      if (!r.Str(&key) || !r.Get(&world_size)) return false;
      // Wraps as ADD does: a hostile count is just a number.
      const int64_t count = static_cast<int64_t>(static_cast<uint64_t>(CounterAt(key)) + 1);
      if (count >= world_size) {
        Set(key, absl::Cord(absl::StrCat(count)));  // wakes the ranks that arrived before
        Reply(id, c, Raw<uint8_t>(kStopWaiting));
      } else {
        kv_[key] = absl::Cord(absl::StrCat(count));  // counted without waking anyone, as LibTorch's server
        CancelWait(c);
        AwaitKey(id, c, key);
      }
      return true;
    }
    case kInvalid:
      return false;
  }
  return false;
}

void StoreCore::Set(const std::string& key, absl::Cord value) {
  kv_[key] = std::move(value);
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::map<uint64_t, StoreClientId> line = std::move(it->second);
  waiters_.erase(it);
  for (const auto& [arrival, waiter] : line) KeyArrived(waiter);
}

void StoreCore::KeyArrived(StoreClientId waiter) {
  auto it = clients_.find(waiter);
  if (it == clients_.end() || it->second.keys_awaited == 0) return;
  Client& c = it->second;
  if (--c.keys_awaited > 0) return;
  ClearWaits(c);
  Reply(waiter, c, Raw<uint8_t>(kStopWaiting));
}

int64_t StoreCore::CounterAt(const std::string& key) const {
  int64_t value = 0;
  auto it = kv_.find(key);
  // A number has at most 20 digits: a longer value (whitespace around one, or a hostile 64 MiB) is
  // not copied to be parsed, and counts as 0.
  if (it != kv_.end() && (it->second.size() > 64 || !absl::SimpleAtoi(std::string(it->second), &value))) value = 0;
  return value;
}

bool StoreCore::Present(const std::string& key) const {
  auto q = queues_.find(key);
  return kv_.count(key) > 0 || (q != queues_.end() && !q->second.empty());
}

void StoreCore::WakeOne(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const StoreClientId first = it->second.begin()->second;  // a line is erased when it empties
  it->second.erase(it->second.begin());
  if (it->second.empty()) waiters_.erase(it);
  KeyArrived(first);  // one item, one waiter
}

void StoreCore::StartWait(StoreClientId id, Client& c, std::vector<std::string> keys) {
  CancelWait(c);  // a client waits for one thing at a time, as LibTorch's server counts it
  // A key named twice is awaited once: the answer is the same, and a hostile WAIT of one key
  // repeated millions of times holds one place, not millions.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  for (const std::string& k : keys) {
    if (!Present(k) && !AwaitKey(id, c, k)) return;
  }
  if (c.keys_awaited == 0) Reply(id, c, Raw<uint8_t>(kStopWaiting));
}

bool StoreCore::AwaitKey(StoreClientId id, Client& c, const std::string& key) {
  const uint64_t bytes = key.size() + kWaitOverheadBytes;
  if (wait_bytes_ + bytes > max_wait_bytes_) {
    last_error_ = absl::StrCat("the clients' pending WAITs would hold more than ", max_wait_bytes_, " bytes");
    refused_ = true;
    return false;
  }
  const uint64_t arrival = arrivals_++;
  waiters_[key].emplace(arrival, id);
  c.waits.emplace_back(key, arrival);
  c.wait_bytes += bytes;
  wait_bytes_ += bytes;
  ++c.keys_awaited;
  return true;
}

void StoreCore::ClearWaits(Client& c) {
  c.waits.clear();
  wait_bytes_ -= c.wait_bytes;
  c.wait_bytes = 0;
}

void StoreCore::CancelWait(Client& c) {
  for (const auto& [key, arrival] : c.waits) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) continue;  // set since: the whole line was answered
    it->second.erase(arrival);
    if (it->second.empty()) waiters_.erase(it);
  }
  ClearWaits(c);
  c.keys_awaited = 0;
}

void StoreCore::Reply(StoreClientId id, Client& c, absl::string_view bytes) {
  c.out.Append(bytes);
  backlog_ += bytes.size();
  pending_output_.insert(id);
}

// The value joins the client's output without a copy (a Cord shares its chunks): a value may be
// 64 MiB, read by every rank.
void StoreCore::ReplyValue(StoreClientId id, Client& c, const absl::Cord& value) {
  const uint64_t len = value.size();
  Reply(id, c, absl::string_view(reinterpret_cast<const char*>(&len), sizeof(len)));
  c.out.Append(value);
  backlog_ += value.size();
}

void StoreCore::OnDisconnect(StoreClientId id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  CancelWait(it->second);
  buffered_ -= it->second.in.size();
  backlog_ -= it->second.out.size() + it->second.unsent;
  held_.erase(id);
  clients_.erase(it);
  pending_output_.erase(id);
}

absl::Cord StoreCore::TakeOutput(StoreClientId id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return {};
  backlog_ -= it->second.out.size();
  return std::exchange(it->second.out, {});
}

std::vector<StoreClientId> StoreCore::TakeClientsWithOutput() {
  std::vector<StoreClientId> ids(pending_output_.begin(), pending_output_.end());
  pending_output_.clear();
  return ids;
}

}  // namespace dtrun

#include "agent/store_core.h"

#include <cstring>
#include <limits>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

// Little helpers that write requests the way LibTorch's TCPStore client does.
template <typename T>
std::string Raw(T v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(T)); }
std::string Str(const std::string& s) { return Raw<uint64_t>(s.size()) + s; }
std::string Op(uint8_t code) { return Raw<uint8_t>(code); }
template <typename T>
T As(const std::string& bytes) {
  T v{};
  EXPECT_EQ(bytes.size(), sizeof(T));
  std::memcpy(&v, bytes.data(), std::min(bytes.size(), sizeof(T)));
  return v;
}
std::string Out(StoreCore& core, StoreClientId id) { return std::string(core.TakeOutput(id)); }
// Legacy (1.13) op codes.
constexpr uint8_t kSet = 0, kCompareSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kWait = 5,
                  kNumKeys = 6, kDelete = 8;
std::string Validate() { return Op(0) + Raw<uint32_t>(0x3C85F7CE); }

TEST(StoreCoreTest, SetThenGetReturnsTheValue) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("k") + Str("value")));
  ASSERT_TRUE(core.OnData(1, Op(kGet) + Str("k")));
  EXPECT_EQ(Out(core, 1), Str("value"));
}

TEST(StoreCoreTest, AddReturnsTheRunningTotalAsInt64) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kAdd) + Str("n") + Raw<int64_t>(3)));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 3);
  ASSERT_TRUE(core.OnData(2, Op(kAdd) + Str("n") + Raw<int64_t>(-1)));
  EXPECT_EQ(As<int64_t>(Out(core, 2)), 2);
  ASSERT_TRUE(core.OnData(2, Op(kGet) + Str("n")));
  EXPECT_EQ(Out(core, 2), Str("2"));
}

// Found by fuzz/store_core_fuzz: a hostile delta overflowed a signed integer (undefined behaviour).
TEST(StoreCoreTest, AddPastInt64MaxWrapsAsLibTorchDoes) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kAdd) + Str("n") + Raw<int64_t>(std::numeric_limits<int64_t>::max())));
  ASSERT_TRUE(core.OnData(1, Op(kAdd) + Str("n") + Raw<int64_t>(2)));
  Out(core, 1);
  ASSERT_TRUE(core.OnData(1, Op(kGet) + Str("n")));
  EXPECT_EQ(Out(core, 1), Str(std::to_string(std::numeric_limits<int64_t>::min() + 1)));
}

TEST(StoreCoreTest, WaitIsAnsweredWhenTheLastKeyIsSet) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kWait) + Raw<uint64_t>(2) + Str("a") + Str("b")));
  EXPECT_EQ(Out(core, 1), "");
  ASSERT_TRUE(core.OnData(2, Op(kSet) + Str("a") + Str("1")));
  EXPECT_EQ(Out(core, 1), "");
  ASSERT_TRUE(core.OnData(2, Op(kSet) + Str("b") + Str("2")));
  EXPECT_EQ(core.TakeClientsWithOutput(), std::vector<StoreClientId>{1});
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(0));  // STOP_WAITING
}

TEST(StoreCoreTest, CheckReportsReadyOnlyWhenAllKeysExist) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kCheck) + Raw<uint64_t>(1) + Str("x")));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(1));  // NOT_READY
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("x") + Str("")));
  ASSERT_TRUE(core.OnData(1, Op(kCheck) + Raw<uint64_t>(1) + Str("x")));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(0));  // READY
}

TEST(StoreCoreTest, CompareSetSwapsOnlyOnMatch) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kCompareSet) + Str("k") + Str("") + Str("first")));
  EXPECT_EQ(Out(core, 1), Str("first"));
  ASSERT_TRUE(core.OnData(1, Op(kCompareSet) + Str("k") + Str("wrong") + Str("second")));
  EXPECT_EQ(Out(core, 1), Str("first"));
  ASSERT_TRUE(core.OnData(1, Op(kCompareSet) + Str("k") + Str("first") + Str("second")));
  EXPECT_EQ(Out(core, 1), Str("second"));
}

TEST(StoreCoreTest, DeleteAndNumKeys) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("a") + Str("1") + Op(kNumKeys)));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 1);
  ASSERT_TRUE(core.OnData(1, Op(kDelete) + Str("a")));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 1);
  EXPECT_EQ(core.num_keys(), 0u);
}

TEST(StoreCoreTest, RequestsSplitAcrossReadsAreReassembled) {
  StoreCore core;
  std::string req = Op(kSet) + Str("key") + Str("value") + Op(kGet) + Str("key");
  for (char c : req) ASSERT_TRUE(core.OnData(7, std::string(1, c)));
  EXPECT_EQ(Out(core, 7), Str("value"));
}

TEST(StoreCoreTest, ValidatedClientsUseTheShiftedOpCodes) {
  StoreCore core;
  // 2.2+: VALIDATE, then SET=1, GET=3, PING=13.
  ASSERT_TRUE(core.OnData(1, Validate() + Op(1) + Str("k") + Str("v") + Op(3) + Str("k")));
  EXPECT_EQ(Out(core, 1), Str("v"));
  ASSERT_TRUE(core.OnData(1, Op(13) + Raw<uint32_t>(4242)));
  EXPECT_EQ(As<uint32_t>(Out(core, 1)), 4242u);
}

TEST(StoreCoreTest, CancelWaitAnswersWaitCanceled) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Validate() + Op(6) + Raw<uint64_t>(1) + Str("never")));
  ASSERT_TRUE(core.OnData(1, Op(12)));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(1));
  ASSERT_TRUE(core.OnData(2, Validate() + Op(1) + Str("never") + Str("x")));
  EXPECT_EQ(Out(core, 1), "");  // the cancelled wait is not woken
}

// 1.13 and 2.0 (no VALIDATE) number WATCH_KEY 7 and DELETE_KEY 8, send nothing past 8, and send
// WATCH_KEY only on their callback client's connection, which sends nothing else.
TEST(StoreCoreTest, UnvalidatedClientsUseTheTorch20NumberingForSevenAndEight) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("k") + Str("v") + Op(8) + Str("k")));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 1);  // DELETE_KEY
  ASSERT_TRUE(core.OnData(2, Op(7) + Str("k") + Op(7) + Str("j")));
  EXPECT_EQ(Out(core, 2), Raw<uint8_t>(3) + Raw<uint8_t>(3));  // the callback connection's WATCH_KEYs
}

// A 2.1 nightly (no VALIDATE, no WATCH_KEY) whose DELETE_KEY (7) comes after other requests and
// before any code only its numbering has: 1.13 never sends 7 there, so it is read as DELETE_KEY, and
// the connection's 8 is APPEND from then on.
TEST(StoreCoreTest, ASevenAfterOtherRequestsIsThe21NightliesDeleteKey) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("k") + Str("v") + Op(7) + Str("k")));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 1);  // DELETE_KEY, not a WATCH_KEY acknowledgement
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("a") + Str("x") + Op(8) + Str("a") + Str("y") + Op(kGet) + Str("a")));
  EXPECT_EQ(Out(core, 1), Str("xy"));  // APPEND
}

// The 2.1 nightlies (no VALIDATE, no WATCH_KEY) number CANCEL_WAIT 11: that moves the connection to
// their numbering, where 7 is DELETE_KEY and 8 APPEND. Another connection keeps 1.13's.
TEST(StoreCoreTest, ACodeOnlyThe21NightliesSendSwitchesThatConnectionToTheirNumbering) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kWait) + Raw<uint64_t>(1) + Str("never") + Op(11)));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(1));  // WAIT_CANCELED
  ASSERT_TRUE(core.OnData(1, Op(kSet) + Str("k") + Str("ab") + Op(8) + Str("k") + Str("cd")));
  ASSERT_TRUE(core.OnData(1, Op(kGet) + Str("k")));
  EXPECT_EQ(Out(core, 1), Str("abcd"));  // APPEND, no reply of its own
  ASSERT_TRUE(core.OnData(1, Op(7) + Str("k")));
  EXPECT_EQ(As<int64_t>(Out(core, 1)), 1);  // DELETE_KEY
  ASSERT_TRUE(core.OnData(1, Op(9) + Raw<uint64_t>(1) + Str("gone")));
  EXPECT_EQ(Out(core, 1), Str(""));  // MULTI_GET
  ASSERT_TRUE(core.OnData(2, Op(7) + Str("w")));
  EXPECT_EQ(Out(core, 2), Raw<uint8_t>(3));  // still 1.13's WATCH_KEY on another connection
  EXPECT_FALSE(core.OnData(1, Op(12)));
  EXPECT_NE(core.last_error().find("request type 12 is not one 2.1 nightly clients send"), std::string::npos)
      << core.last_error();
}

TEST(StoreCoreTest, RejectsUnknownOpCodesAndAbsurdLengths) {
  StoreCore core;
  EXPECT_FALSE(core.OnData(1, Op(200)));
  EXPECT_NE(core.last_error().find("request type 200 is not one LibTorch 1.13-2.0 clients send"), std::string::npos)
      << core.last_error();
  EXPECT_FALSE(core.OnData(2, Op(kGet) + Raw<uint64_t>(1ull << 40)));
  EXPECT_NE(core.last_error().find("64 MiB"), std::string::npos) << core.last_error();
  // Past the newest numbering, after VALIDATE: named the same way.
  EXPECT_FALSE(core.OnData(3, Validate() + Op(30) + Str("q")));
  EXPECT_NE(core.last_error().find("request type 30 is not one LibTorch 2.2+ clients send"), std::string::npos)
      << core.last_error();
}

TEST(StoreCoreTest, ClaimedCountsAndLengthsAreBoundedByWhatWasSent) {
  // Nine bytes claiming 2^30 (or 2^25) keys used to allocate them all and abort dtrun.
  for (uint64_t n : {uint64_t{1} << 30, uint64_t{1} << 25}) {
    StoreCore core;
    EXPECT_FALSE(core.OnData(1, Op(kCheck) + Raw<uint64_t>(n))) << n;
    EXPECT_FALSE(core.OnData(2, Op(kWait) + Raw<uint64_t>(n))) << n;
  }
  // A plausible count with no keys yet waits for them, allocating nothing, and still works.
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kCheck) + Raw<uint64_t>(2)));
  ASSERT_TRUE(core.OnData(1, Str("a") + Str("b")));
  EXPECT_EQ(As<uint8_t>(Out(core, 1)), 1);  // not ready
  // A value larger than the request limit closes the client before its bytes arrive.
  EXPECT_FALSE(core.OnData(3, Op(kSet) + Str("k") + Raw<uint64_t>(StoreCore::kMaxRequestBytes + 1)));
  // MULTI_SET (10 without VALIDATE) with an absurd pair count, too.
  EXPECT_FALSE(core.OnData(4, Op(10) + Raw<uint64_t>(uint64_t{1} << 40)));
  // Closing the offenders leaves the accounting whole: other clients are still served.
  for (StoreClientId id : {3, 4}) core.OnDisconnect(id);
  ASSERT_TRUE(core.OnData(5, Op(kSet) + Str("k") + Str("v")));
  ASSERT_TRUE(core.OnData(5, Op(kGet) + Str("k")));
  EXPECT_EQ(Out(core, 5), Str("v"));
}

TEST(StoreCoreTest, UnfinishedInputOfAllClientsTogetherIsBounded) {
  StoreCore core;
  const std::string chunk(1 << 20, 'x');
  size_t clients_accepted = 0;
  for (StoreClientId id = 1; id <= 10; ++id) {
    // Each client starts a 60 MiB SET and sends 30 MiB of it.
    bool ok = core.OnData(id, Op(kSet) + Str("k") + Raw<uint64_t>(60ull << 20));
    for (int i = 0; ok && i < 30; ++i) ok = core.OnData(id, chunk);
    clients_accepted += ok;
    if (!ok) core.OnDisconnect(id);
  }
  EXPECT_EQ(clients_accepted, StoreCore::kMaxBufferedBytes / (30ull << 20));
  // Those that were closed freed their share: a new client is served.
  ASSERT_TRUE(core.OnData(99, Op(kSet) + Str("k") + Str("v")));
}

TEST(StoreCoreTest, DisconnectDropsPendingWaits) {
  StoreCore core;
  ASSERT_TRUE(core.OnData(1, Op(kWait) + Raw<uint64_t>(1) + Str("k")));
  core.OnDisconnect(1);
  ASSERT_TRUE(core.OnData(2, Op(kSet) + Str("k") + Str("v")));
  EXPECT_TRUE(core.TakeClientsWithOutput().empty());
}

// LibTorch's server counts a socket's awaited keys anew at each WAIT: a key of an earlier WAIT
// does not answer a later one.
TEST(StoreCoreTest, ASecondWaitReplacesTheFirst) {
  StoreCore core;
  ASSERT_TRUE(
      core.OnData(1, Op(kWait) + Raw<uint64_t>(1) + Str("first") + Op(kWait) + Raw<uint64_t>(1) + Str("second")));
  ASSERT_TRUE(core.OnData(2, Op(kSet) + Str("first") + Str("v")));
  EXPECT_EQ(Out(core, 1), "");
  ASSERT_TRUE(core.OnData(2, Op(kSet) + Str("second") + Str("v")));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(0));
}

// Waiters that leave give up their place: the rest are still answered, a key's line ends with
// its last waiter, and every waiter of a key that is set is answered once.
TEST(StoreCoreTest, WaitersThatDisconnectLeaveTheOthersWaiting) {
  StoreCore core;
  for (StoreClientId id = 1; id <= 6; ++id) {
    ASSERT_TRUE(core.OnData(id, Op(kWait) + Raw<uint64_t>(2) + Str("go") + Str(id % 2 ? "odd" : "even")));
  }
  for (StoreClientId id : {1, 2, 5}) core.OnDisconnect(id);
  ASSERT_TRUE(core.OnData(9, Op(kSet) + Str("odd") + Str("v") + Op(kSet) + Str("go") + Str("v")));
  EXPECT_EQ(core.TakeClientsWithOutput(), (std::vector<StoreClientId>{3}));
  ASSERT_TRUE(core.OnData(9, Op(kSet) + Str("even") + Str("v")));
  EXPECT_EQ(core.TakeClientsWithOutput(), (std::vector<StoreClientId>{4, 6}));
  for (StoreClientId id : {3, 4, 6}) EXPECT_EQ(Out(core, id), Raw<uint8_t>(0));
}

// A key named many times in one WAIT holds one place; what all pending waits hold is bounded,
// a WAIT past it closes its client, and what leaving clients held is free again.
TEST(StoreCoreTest, PendingWaitsAreBounded) {
  constexpr uint64_t kPlace = 1 + StoreCore::kWaitOverheadBytes;  // a one-byte key
  StoreCore core(4 * kPlace);
  std::string repeated = Op(kWait) + Raw<uint64_t>(100000);
  for (int i = 0; i < 100000; ++i) repeated += Str("a");
  ASSERT_TRUE(core.OnData(1, repeated));
  ASSERT_TRUE(core.OnData(2, Op(kWait) + Raw<uint64_t>(3) + Str("b") + Str("c") + Str("d")));
  EXPECT_FALSE(core.OnData(3, Op(kWait) + Raw<uint64_t>(1) + Str("e")));
  EXPECT_NE(core.last_error().find("pending WAITs"), std::string::npos) << core.last_error();
  core.OnDisconnect(3);
  core.OnDisconnect(2);
  ASSERT_TRUE(core.OnData(4, Op(kWait) + Raw<uint64_t>(3) + Str("e") + Str("f") + Str("g")));
  ASSERT_TRUE(core.OnData(5, Op(kSet) + Str("a") + Str("v")));
  EXPECT_EQ(Out(core, 1), Raw<uint8_t>(0)) << "answered once, for its one place";
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

std::string GetRequest(const std::string& key) { return Raw<uint8_t>(2) + Str(key); }  // legacy GET

// A client that pipelines GETs of a large value and never reads: what the store holds for it stops
// at the backlog cap plus one reply; the rest waits unrun until the replies are read.
TEST(StoreCoreBacklogTest, RepliesNobodyReadsStopAtTheCapAndTheRestRunsOnceRead) {
  StoreCore core;
  const std::string big(8 << 20, 'v');
  ASSERT_TRUE(core.OnData(1, Raw<uint8_t>(0) + Str("big") + Str(big)));  // SET
  std::string gets;
  for (int i = 0; i < 64; ++i) gets += GetRequest("big");
  ASSERT_TRUE(core.OnData(1, gets));
  std::string out = Out(core, 1);
  const size_t reply = 8 + big.size();
  EXPECT_EQ(out.size(), 8 * reply) << "64 MiB of replies, then the client waits";
  EXPECT_LE(out.size(), StoreCore::kMaxClientBacklogBytes + reply);
  core.SetUnsent(1, out.size());  // the server could not send them: the client is not reading
  EXPECT_TRUE(core.Waiting(1));
  EXPECT_TRUE(core.holds_requests());
  EXPECT_FALSE(core.CanRunHeld());
  EXPECT_TRUE(core.RunUnblocked().empty());
  EXPECT_TRUE(Out(core, 1).empty()) << "nothing more runs while the replies are unread";
  // Another client is served meanwhile: its own backlog is empty and the total is under its cap.
  ASSERT_TRUE(core.OnData(2, GetRequest("big")));
  EXPECT_EQ(Out(core, 2).size(), reply);
  core.SetUnsent(1, 0);  // read at last
  EXPECT_FALSE(core.Waiting(1));
  EXPECT_TRUE(core.CanRunHeld()) << "the server runs the held GETs now, whatever event brought it here";
  EXPECT_TRUE(core.RunUnblocked().empty());
  EXPECT_EQ(Out(core, 1).size(), 8 * reply);
  EXPECT_EQ(core.backlog(), 0u) << "taken output is the server's to report as unsent";
  core.OnDisconnect(1);
  core.OnDisconnect(2);
  EXPECT_EQ(core.backlog(), 0u);
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

// The newest clients' requests, after VALIDATE: QUEUE_PUSH 14, QUEUE_POP 15, QUEUE_LEN 16,
// LIST_KEYS 17, BARRIER 18, with the replies PyTorch's libuv backend sends.
constexpr uint8_t kVSet = 1, kVWait = 6, kVQueuePush = 14, kVQueuePop = 15, kVQueueLen = 16, kVListKeys = 17,
                  kVBarrier = 18;

TEST(StoreCoreNewestTest, QueuesPushPopAndCountAndWakeOneWaiterPerItem) {
  StoreCore core;
  for (StoreClientId id : {1, 2, 3}) ASSERT_TRUE(core.OnData(id, Validate()));
  // Two consumers wait for the queue (a blocking pop waits on its key first).
  ASSERT_TRUE(core.OnData(2, Op(kVWait) + Raw<uint64_t>(1) + Str("jobs")));
  ASSERT_TRUE(core.OnData(3, Op(kVWait) + Raw<uint64_t>(1) + Str("jobs")));
  EXPECT_TRUE(Out(core, 2).empty());
  ASSERT_TRUE(core.OnData(1, Op(kVQueuePush) + Str("jobs") + Str("a")));
  EXPECT_EQ(Out(core, 2), Raw<uint8_t>(0)) << "the first waiter is woken";
  EXPECT_TRUE(Out(core, 3).empty()) << "one item wakes one waiter";
  ASSERT_TRUE(core.OnData(1, Op(kVQueuePush) + Str("jobs") + Str("b")));
  EXPECT_EQ(Out(core, 3), Raw<uint8_t>(0));
  ASSERT_TRUE(core.OnData(1, Op(kVQueueLen) + Str("jobs")));
  EXPECT_EQ(Out(core, 1), Raw<int64_t>(2));
  ASSERT_TRUE(core.OnData(2, Op(kVQueuePop) + Str("jobs")));
  EXPECT_EQ(Out(core, 2), Raw<int64_t>(2) + Str("a")) << "the size before the pop, then the item";
  ASSERT_TRUE(core.OnData(3, Op(kVQueuePop) + Str("jobs")));
  EXPECT_EQ(Out(core, 3), Raw<int64_t>(1) + Str("b"));
  ASSERT_TRUE(core.OnData(3, Op(kVQueuePop) + Str("jobs")));
  EXPECT_EQ(Out(core, 3), Raw<int64_t>(0)) << "empty: the size alone";
}

TEST(StoreCoreNewestTest, AnItemGoesToTheFirstWaiterStillThere) {
  StoreCore core;
  for (StoreClientId id : {1, 2, 3, 4}) ASSERT_TRUE(core.OnData(id, Validate()));
  for (StoreClientId id : {2, 3, 4}) ASSERT_TRUE(core.OnData(id, Op(kVWait) + Raw<uint64_t>(1) + Str("jobs")));
  core.OnDisconnect(2);
  ASSERT_TRUE(core.OnData(3, Op(12)));  // CANCEL_WAIT
  EXPECT_EQ(Out(core, 3), Raw<uint8_t>(1));
  core.TakeClientsWithOutput();
  ASSERT_TRUE(core.OnData(1, Op(kVQueuePush) + Str("jobs") + Str("a")));
  EXPECT_EQ(core.TakeClientsWithOutput(), std::vector<StoreClientId>{4});
  EXPECT_EQ(Out(core, 4), Raw<uint8_t>(0));
}

TEST(StoreCoreNewestTest, ListKeysNamesEveryKeyAndABarrierReleasesEveryRankAtTheLast) {
  StoreCore core;
  for (StoreClientId id : {1, 2, 3}) ASSERT_TRUE(core.OnData(id, Validate()));
  ASSERT_TRUE(core.OnData(1, Op(kVSet) + Str("only") + Str("v")));
  ASSERT_TRUE(core.OnData(1, Op(kVListKeys)));
  EXPECT_EQ(Out(core, 1), Raw<int64_t>(1) + Str("only"));
  ASSERT_TRUE(core.OnData(1, Op(kVBarrier) + Str("b") + Raw<int64_t>(3)));
  ASSERT_TRUE(core.OnData(2, Op(kVBarrier) + Str("b") + Raw<int64_t>(3)));
  EXPECT_TRUE(Out(core, 1).empty());
  EXPECT_TRUE(Out(core, 2).empty());
  ASSERT_TRUE(core.OnData(3, Op(kVBarrier) + Str("b") + Raw<int64_t>(3)));
  for (StoreClientId id : {1, 2, 3}) EXPECT_EQ(Out(core, id), Raw<uint8_t>(0)) << "rank " << id;
  // A counter at the top of int64 wraps (as ADD does) instead of overflowing.
  ASSERT_TRUE(core.OnData(1, Op(kVSet) + Str("top") + Str("9223372036854775807")));
  ASSERT_TRUE(core.OnData(1, Op(kVBarrier) + Str("top") + Raw<int64_t>(2)));
  EXPECT_TRUE(Out(core, 1).empty()) << "the wrapped count is below the world size: it waits";
}

}  // namespace
}  // namespace dtrun

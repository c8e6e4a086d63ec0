#include "progress/report_protocol.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun::progress {
namespace {

TEST(ReportProtocolTest, EveryKindRoundTrips) {
  Report beat;
  beat.kind = Report::Kind::kBeat;
  beat.step = 120;
  beat.samples = 15360;
  Report begin;
  begin.kind = Report::Kind::kBegin;
  begin.name = "checkpoint";
  Report hello;
  hello.kind = Report::Kind::kHello;
  hello.lang = "python";
  hello.stack_signal = 40;
  Report warm_hello;
  warm_hello.kind = Report::Kind::kHello;
  warm_hello.lang = "cpp";
  warm_hello.warm = true;
  Report total;
  total.kind = Report::Kind::kTotal;
  total.total_steps = 90000;
  Report snap;
  snap.kind = Report::Kind::kSnapshot;
  snap.step = 12;
  snap.bytes = 94371840;
  snap.micros = 31000;
  Report restored;
  restored.kind = Report::Kind::kRestored;
  restored.source = "memory";
  restored.step = 12;
  Report sync;
  sync.kind = Report::Kind::kSync;
  sync.step = 12;
  sync.wait_micros = 4100;
  sync.step_micros = 250000;
  Report kept;
  kept.kind = Report::Kind::kKept;
  kept.step = 12;
  Report keeping;
  keeping.kind = Report::Kind::kKeeping;
  keeping.step = 12;
  keeping.bytes = 94371840;
  Report not_kept;
  not_kept.kind = Report::Kind::kNotKept;
  not_kept.step = 12;
  for (const Report& r : {beat, begin, hello, warm_hello, total, snap, restored, sync, keeping, kept, not_kept}) {
    absl::StatusOr<Report> back = ParseReport(FormatReport(r));
    ASSERT_TRUE(back.ok()) << FormatReport(r) << ": " << back.status();
    EXPECT_EQ(FormatReport(*back), FormatReport(r));
  }
  EXPECT_TRUE(ParseReport(FormatReport(warm_hello))->warm);
  EXPECT_FALSE(ParseReport(FormatReport(hello))->warm);
  absl::StatusOr<Report> b = ParseReport("beat step=7 samples=56\n");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b->step, 7);
  EXPECT_EQ(*b->samples, 56);
}

TEST(ReportProtocolTest, SyncReportsNeedTheirThreeCounts) {
  EXPECT_THAT(ParseReport("sync step=5 wait_us=10"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("needs")));
  EXPECT_THAT(ParseReport("sync wait_us=10 step_us=20"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("needs")));
  EXPECT_THAT(ParseReport("sync step=5 wait_us=-10 step_us=20"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("wait_us")));
  EXPECT_THAT(ParseReport("sync step=5 wait_us=1e9 step_us=20"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("wait_us")));
  absl::StatusOr<Report> r = ParseReport("sync step=5 wait_us=10 step_us=20");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->wait_micros, 10);
  EXPECT_EQ(*r->step_micros, 20);
}

TEST(ReportProtocolTest, DivergedReportsCarryHexFingerprints) {
  absl::StatusOr<Report> r = ParseReport("diverged step=12 fingerprint=00ab12cd34ef5678 majority=none");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->fingerprint, "00ab12cd34ef5678");
  EXPECT_EQ(r->majority, "none");
  EXPECT_EQ(FormatReport(*r), "diverged step=12 fingerprint=00ab12cd34ef5678 majority=none");
  EXPECT_TRUE(ParseReport("diverged step=12 fingerprint=00ab12cd34ef5678 majority=91fe000000000001").ok());
  for (const char* bad : {"diverged step=12 fingerprint=00AB12CD34EF5678 majority=none",  // upper case
                          "diverged step=12 fingerprint=00ab majority=none",              // short
                          "diverged step=12 fingerprint=none majority=none",              // not hex
                          "diverged step=12 majority=none", "diverged fingerprint=00ab12cd34ef5678 majority=none",
                          "diverged step=12 fingerprint=00ab12cd34ef5678"}) {
    EXPECT_THAT(ParseReport(bad), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                              ::testing::Not(::testing::IsEmpty())))
        << bad;
  }
}

TEST(ReportProtocolTest, SnapshotAndRestoredReportsAreChecked) {
  EXPECT_THAT(
      ParseReport("snapshot bytes=5"),
      ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("snapshot")));  // no step
  EXPECT_THAT(
      ParseReport("restored step=5"),
      ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("restored")));  // no source
  EXPECT_THAT(
      ParseReport("restored source=tape step=5"),
      ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("source")));  // not a source
  for (const char* kind : {"keeping", "kept", "not_kept"}) {
    EXPECT_THAT(ParseReport(kind),
                ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr(kind)));  // no step
  }
  absl::StatusOr<Report> keeping = ParseReport("keeping step=9");  // a Python worker does not count the bytes
  ASSERT_TRUE(keeping.ok()) << keeping.status();
  EXPECT_FALSE(keeping->bytes.has_value());
  EXPECT_THAT(ParseReport("snapshot step=-1"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("count")));
  absl::StatusOr<Report> r = ParseReport("restored source=none");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->step.has_value());
}

TEST(ReportProtocolTest, UnknownFieldsAreIgnoredForNewerClients) {
  absl::StatusOr<Report> r = ParseReport("beat step=3 loss=0.25 gpu=H100");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r->step, 3);
}

TEST(ReportProtocolTest, AnythingElseIsRefusedWithAReason) {
  const std::string too_long = "beat step=1 " + std::string(600, 'x') + "=1";
  for (const std::string& bad : {std::string(""), std::string("   "), std::string("launch step=1"),
                                 std::string("beat step=-1"), std::string("beat step=+1"), std::string("beat step= 1"),
                                 std::string("beat step=99999999999999999999"), std::string("beat step=4611686018427387905"),
                                 std::string("beat step"), std::string("beat =3"), std::string("begin"),
                                 std::string("begin name=a/b"), std::string("begin name=") + std::string(65, 'a'),
                                 std::string("end name=\xff"), std::string("beat step=1\nbeat step=2"),
                                 std::string("beat step=1\0", 13), std::string("hello stack_signal=0"),
                                 std::string("hello stack_signal=65"), std::string("hello stack_signal=9"), std::string("hello stack_signal=15"), std::string("hello lang=Python"),
                                 std::string("hello warm=2"), std::string("hello warm=yes"), std::string("hello warm="),
                                 std::string("total"), too_long}) {
    absl::StatusOr<Report> r = ParseReport(bad);
    EXPECT_THAT(r, ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_)) << "accepted: " << bad;
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty());
    }
  }
}

}  // namespace
}  // namespace dtrun::progress

// The status rows' bounds, their JSON and table forms, and the Prometheus text.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "status/node_status.h"
#include "status/prometheus.h"
#include "status/status_json.h"
#include "status/status_table.h"
#include "tests/support/status_matchers.h"

namespace dtrun::status {
namespace {

RankStatus Row(int rank, int64_t step) {
  RankStatus r;
  r.global_rank = rank;
  r.local_rank = rank % 2;
  r.pid = 1000 + rank;
  r.state = "running";
  r.step = step;
  r.steps_per_s = 2.5;
  r.samples_per_s = 80;
  r.section = "step";
  r.section_age_s = 0.25;
  r.heartbeat_age_s = 0.5;
  r.cpu_percent = 97;
  r.rss_bytes = 3 << 20;
  return r;
}

JobStatus TwoNodes() {
  JobStatus job;
  job.run_id = "j1";
  job.phase = "running";
  job.round = 2;
  job.restarts_used = 1;
  for (int n = 0; n < 2; ++n) {
    NodeStatus node;
    node.node_id = "n" + std::to_string(n);
    node.host = "host" + std::to_string(n);
    node.nproc = 2;
    node.round = 2;
    node.time_unix_ms = 1000;
    node.total_steps = 100;
    node.ranks = {Row(2 * n, 10 + n), Row(2 * n + 1, 12)};
    job.nodes.push_back(node);
  }
  return job;
}

TEST(NodeStatusTest, AcceptsWhatAnAgentBuildsAndRefusesEachBrokenField) {
  NodeStatus node = TwoNodes().nodes[0];
  EXPECT_TRUE(CheckNodeStatus(node, 2).ok());
  EXPECT_THAT(CheckNodeStatus(node, 1),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::HasSubstr("status")));  // more rows than workers
  auto broken = [&](auto change) {
    NodeStatus n = node;
    change(n.ranks[1]);
    return CheckNodeStatus(n, 2);
  };
  EXPECT_THAT(broken([](RankStatus& r) { r.state = std::string(65, 'x'); }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(broken([](RankStatus& r) { r.section = "a\nb"; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("section")));
  EXPECT_THAT(broken([](RankStatus& r) { r.steps_per_s = std::nan(""); }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("steps_per_s")));
  EXPECT_THAT(broken([](RankStatus& r) { r.cpu_percent = std::numeric_limits<double>::infinity(); }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("cpu_percent")));
  EXPECT_THAT(broken([](RankStatus& r) { r.heartbeat_age_s = -5; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("heartbeat_age_s")));
  EXPECT_THAT(broken([](RankStatus& r) { r.step = -7; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(broken([](RankStatus& r) { r.snapshot_bytes = -2; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("snapshot_bytes")));
  EXPECT_THAT(broken([](RankStatus& r) { r.buddy_step = -2; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("buddy_step")));
  EXPECT_THAT(broken([](RankStatus& r) { r.kept_step = -2; }),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("kept_step")));
  NodeStatus bad_buddy = node;
  bad_buddy.buddy = "10.0.0.1:1\x1b[2J";
  EXPECT_THAT(CheckNodeStatus(bad_buddy, 2),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  absl::Status named = broken([](RankStatus& r) { r.pid = -3; });
  EXPECT_NE(named.message().find("'pid'"), std::string::npos) << named;
}

TEST(NodeStatusTest, TheJobStepIsTheSlowestRanksAndSpeedsCombine) {
  NodeStatus node = TwoNodes().nodes[1];
  EXPECT_EQ(JobStep(node), 11);
  EXPECT_DOUBLE_EQ(SamplesPerSecond(node), 160);
  node.ranks[0].steps_per_s = 1.5;
  EXPECT_DOUBLE_EQ(StepsPerSecond(node), 1.5);
  node.ranks = {};
  EXPECT_EQ(JobStep(node), -1);
  EXPECT_EQ(SamplesPerSecond(node), -1);
}

TEST(NodeStatusTest, AgesMoveOnToTheTimeOfReading) {
  JobStatus job = TwoNodes();
  job.nodes[0].ranks[0].section_age_s = -1;  // unknown stays unknown
  AgeTo(job, 3500);
  EXPECT_DOUBLE_EQ(job.nodes[0].ranks[1].heartbeat_age_s, 3.0);
  EXPECT_DOUBLE_EQ(job.nodes[0].ranks[1].section_age_s, 2.75);
  EXPECT_EQ(job.nodes[0].ranks[0].section_age_s, -1);
}

TEST(StatusJsonTest, RoundTripsAndWritesUnknownsAsNull) {
  JobStatus job = TwoNodes();
  job.nodes[1].ranks[0].gpu_mem_bytes = 5 << 20;
  job.nodes[1].ranks[1].snapshot_step = 11;
  job.nodes[1].ranks[1].snapshot_bytes = 94 << 20;
  job.nodes[1].ranks[1].buddy_step = 10;
  job.nodes[1].ranks[1].kept_step = 11;
  job.nodes[1].buddy = "10.0.0.1:40001";
  nlohmann::json j = ToJson(job);
  EXPECT_EQ(j["nodes"][1]["ranks"][1]["snapshot_step"], 11);
  EXPECT_EQ(j["nodes"][1]["ranks"][1]["buddy_step"], 10);
  EXPECT_EQ(j["nodes"][1]["ranks"][1]["kept_step"], 11);
  EXPECT_TRUE(j["nodes"][1]["ranks"][0]["kept_step"].is_null());
  EXPECT_EQ(j["nodes"][1]["buddy"], "10.0.0.1:40001");
  EXPECT_TRUE(j["nodes"][0]["buddy"].is_null());
  EXPECT_TRUE(j["nodes"][1]["ranks"][0]["snapshot_step"].is_null());
  EXPECT_EQ(j["schema"], "dtrun.status/v1");
  EXPECT_TRUE(j["nodes"][0]["ranks"][0]["gpu_util_percent"].is_null());
  EXPECT_EQ(j["nodes"][1]["ranks"][0]["gpu_mem_bytes"], 5 << 20);
  absl::StatusOr<JobStatus> back = JobStatusFromJson(nlohmann::json::parse(j.dump()), 8);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), j);
}

TEST(StatusJsonTest, RefusesDocumentsThatAreNotStatusOrBreakTheBounds) {
  const size_t max = 2;
  auto parse = [&](const std::string& text) {
    return JobStatusFromJson(nlohmann::json::parse(text, nullptr, false), max);
  };
  EXPECT_THAT(parse("not json"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("document")));
  EXPECT_THAT(parse("[]"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("document")));
  EXPECT_THAT(parse(R"({"schema": 7, "nodes": []})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("document")));
  EXPECT_THAT(parse(R"({"schema": "dtrun.status/v1"})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(parse(R"({"schema": "dtrun.status/v1", "nodes": [{"ranks": [1]}]})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(parse(R"({"schema": "dtrun.status/v1", "nodes": [{"ranks": [{"step": "x"}]}]})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(parse(R"({"schema": "dtrun.status/v1", "nodes": [{"ranks": [{}, {}, {}]}]})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  EXPECT_THAT(parse(R"({"schema": "dtrun.status/v1", "nodes": [{"host": "a\u0001b"}]})"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("status")));
  absl::StatusOr<JobStatus> ok = parse(R"({"schema": "dtrun.status/v1", "later": 1, "nodes": [{"ranks": [{"step": 4}]}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->nodes[0].ranks[0].step, 4);
}

TEST(StatusTableTest, OneHeaderAndOneRowPerRankWithDashesForUnknowns) {
  JobStatus job = TwoNodes();
  job.nodes[0].ranks[1].snapshot_step = 12;
  job.nodes[0].ranks[1].snapshot_bytes = 94 << 20;
  job.nodes[0].ranks[1].buddy_step = 10;
  job.nodes[0].ranks[1].kept_step = 12;
  job.nodes[0].buddy = "10.0.0.2:40001";
  NodeStatus quiet;  // joined, nothing pushed yet
  quiet.host = "quiet";
  quiet.nproc = 2;
  job.nodes.push_back(quiet);
  const std::string table = RenderTable(job);
  EXPECT_EQ(table.rfind("run j1: running, round 2, 1 restart(s) used, 3 node(s), 4 rank(s), step 10/100\n", 0), 0u) << table;
  EXPECT_NE(table.find("host1                2     0     1002 running         11     2.50       80.0 step"), std::string::npos)
      << table;
  EXPECT_NE(table.find("3.0 MiB"), std::string::npos);
  EXPECT_NE(table.find("SNAP  SNAP_SIZE BUDDY                 BUDDY_SNAP     KEPT  SYNC_WAIT\n"), std::string::npos) << table;
  // A rank with a snapshot, a copy of it on its buddy and in --snapshot-dir; one with none.
  EXPECT_NE(table.find("      12   94.0 MiB 10.0.0.2:40001                10       12          -\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("       -          - -                              -        -          -\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("quiet"), std::string::npos);
  EXPECT_NE(table.find("no report from this node yet"), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 4 + 1);
}

TEST(StatusTableTest, TheNamedStragglerHasAJobLineAndItsWaitIsMarked) {
  JobStatus job = TwoNodes();
  job.nodes[1].ranks[1].sync_wait_s = 0.0012;
  job.nodes[0].ranks[0].sync_wait_s = 0.061;
  job.straggler = StragglerStatus{3, "node 1 (vm, 198.18.0.3)", 17, 20, 0.234};
  const std::string table = RenderTable(job);
  EXPECT_NE(table.find("\nstraggler: rank 3 on node 1 (vm, 198.18.0.3) arrived last at the gradient all-reduce in 17 "
                       "of the last 20 steps, costing every rank 23% of the step time\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("     1.2ms*\n"), std::string::npos) << table;
  EXPECT_NE(table.find("    61.0ms\n"), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3 + 4);
}

// Where buddy copies can go: the nodes' failure domains, counted, under the job's line; nothing
// when no node said one. Many domains are cut short (in the order of their names).
TEST(StatusTableTest, TheFailureDomainsAreCountedUnderTheJobsLine) {
  JobStatus job = TwoNodes();
  EXPECT_EQ(RenderHeader(job).find("failure domains"), std::string::npos);
  job.nodes[0].failure_domain = "leaf0";
  EXPECT_NE(RenderHeader(job).find("\nfailure domains: (none said) (1 node), leaf0 (1 node)\n"), std::string::npos)
      << RenderHeader(job);
  job.nodes[1].failure_domain = "leaf0";
  EXPECT_NE(RenderHeader(job).find("\nfailure domains: leaf0 (2 nodes)\n"), std::string::npos) << RenderHeader(job);
  for (int i = 0; i < 10; ++i) {
    job.nodes.push_back(job.nodes[0]);
    job.nodes.back().failure_domain = "leaf" + std::to_string(i + 1);
  }
  EXPECT_NE(RenderHeader(job).find(", leaf6 (1 node), and 3 more\n"), std::string::npos) << RenderHeader(job);
  nlohmann::json j = ToJson(job);
  EXPECT_EQ(j["nodes"][2]["failure_domain"], "leaf1");
  absl::StatusOr<JobStatus> back = JobStatusFromJson(nlohmann::json::parse(j.dump()), 8);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->nodes[2].failure_domain, "leaf1");
}

TEST(StatusJsonTest, TheStragglerAndTheWaitsRoundTripAndBadOnesAreRefused) {
  JobStatus job = TwoNodes();
  job.nodes[0].ranks[0].sync_wait_s = 0.05;
  job.straggler = StragglerStatus{1, "node host0", 9, 10, 0.4};
  absl::StatusOr<JobStatus> back = JobStatusFromJson(ToJson(job), kMaxRanksPerNode);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->straggler.has_value());
  EXPECT_EQ(back->straggler->global_rank, 1);
  EXPECT_EQ(back->straggler->host, "node host0");
  EXPECT_EQ(back->straggler->last_in, 9);
  EXPECT_DOUBLE_EQ(back->straggler->cost_share, 0.4);
  EXPECT_DOUBLE_EQ(back->nodes[0].ranks[0].sync_wait_s, 0.05);
  // A whole node: no rank, the node's label.
  job.straggler = StragglerStatus{-1, "node 2 (vm, 198.19.1.12)", 15, 20, 0.3, -1, StragglerKind::kNode};
  absl::StatusOr<JobStatus> node = JobStatusFromJson(ToJson(job), kMaxRanksPerNode);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(ToJson(job)["straggler"]["rank"].is_null());
  EXPECT_EQ(ToJson(job)["straggler"]["kind"], "node");
  EXPECT_EQ(node->straggler->global_rank, -1);
  EXPECT_EQ(node->straggler->kind, StragglerKind::kNode);
  EXPECT_EQ(node->straggler->host, "node 2 (vm, 198.19.1.12)");
  // A file written before kinds: no rank is a node.
  nlohmann::json old = ToJson(job);
  old["straggler"].erase("kind");
  ASSERT_TRUE(JobStatusFromJson(old, kMaxRanksPerNode).ok());
  EXPECT_EQ(JobStatusFromJson(old, kMaxRanksPerNode)->straggler->kind, StragglerKind::kNode);
  // A slow link.
  job.straggler = StragglerStatus{6, "node 3 (vm, 198.19.1.13)", 18, 20, 0.1, 40, StragglerKind::kLink};
  absl::StatusOr<JobStatus> link = JobStatusFromJson(ToJson(job), kMaxRanksPerNode);
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(link->straggler->kind, StragglerKind::kLink);
  EXPECT_EQ(link->straggler->global_rank, 6);
  for (const char* bad : {R"({"rank":-1,"host":"","last_in":1,"window":2,"cost_share":0.1})",
                          R"({"rank":1,"host":"h","last_in":1,"window":2,"cost_share":0.1,"kind":"disk"})",
                          R"({"rank":1,"host":"h","last_in":1,"window":2,"cost_share":0.1,"kind":"node"})",
                          R"({"rank":1,"host":"","last_in":3,"window":2,"cost_share":0.1})",
                          R"({"rank":1,"host":"","last_in":1,"window":2,"cost_share":7})", R"("rank 1")"}) {
    nlohmann::json j = ToJson(job);
    j["straggler"] = nlohmann::json::parse(bad);
    EXPECT_EQ(JobStatusFromJson(j, kMaxRanksPerNode).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(NodeStatusTest, WaitsAreBoundedAndCarriedOverWhenASummaryIsReplacedUnsent) {
  NodeStatus older = TwoNodes().nodes[0];
  NodeStatus newer = older;
  older.ranks[0].waits = {{1, 0.1, 0.2}, {2, 0.1, 0.2}, {3, 0.1, 0.2}};
  newer.ranks[0].waits = {{3, 0.1, 0.2}, {4, 0.0, 0.2}};
  CarryWaitsOver(older, newer);
  ASSERT_EQ(newer.ranks[0].waits.size(), 4u);
  EXPECT_EQ(newer.ranks[0].waits.front().step, 1);
  EXPECT_EQ(newer.ranks[0].waits.back().step, 4);
  EXPECT_TRUE(newer.ranks[1].waits.empty());
  EXPECT_TRUE(CheckNodeStatus(newer, 2).ok());

  newer.ranks[0].waits.assign(kMaxWaitsPerRank + 1, StepWait{1, 0.1, 0.2});
  EXPECT_EQ(CheckNodeStatus(newer, 2).code(), absl::StatusCode::kInvalidArgument);
  newer.ranks[0].waits = {{5, std::nan(""), 0.2}};
  EXPECT_EQ(CheckNodeStatus(newer, 2).code(), absl::StatusCode::kInvalidArgument);
  newer.ranks[0].waits = {{5, -0.5, 0.2}};
  EXPECT_EQ(CheckNodeStatus(newer, 2).code(), absl::StatusCode::kInvalidArgument);
  // The newest kMaxWaitsPerRank are kept when the two together hold more.
  older.ranks[0].waits.clear();
  for (int64_t s = 1; s <= 60; ++s) older.ranks[0].waits.push_back({s, 0.1, 0.2});
  newer.ranks[0].waits.clear();
  for (int64_t s = 61; s <= 70; ++s) newer.ranks[0].waits.push_back({s, 0.1, 0.2});
  CarryWaitsOver(older, newer);
  ASSERT_EQ(newer.ranks[0].waits.size(), kMaxWaitsPerRank);
  EXPECT_EQ(newer.ranks[0].waits.front().step, 70 - static_cast<int64_t>(kMaxWaitsPerRank) + 1);
}

// What the service and the status file both check before they keep a verdict from outside.
TEST(NodeStatusTest, AStragglerFromOutsideIsCheckedFieldByField) {
  EXPECT_TRUE(CheckStraggler({3, "node 1 (vm, 10.0.0.2)", 17, 20, 0.25, 40}).ok());
  EXPECT_TRUE(CheckStraggler({-1, "node 1 (vm, 10.0.0.2)", 17, 20, 0.25, -1, StragglerKind::kNode}).ok()) << "a node";
  EXPECT_TRUE(CheckStraggler({3, "node 1 (vm, 10.0.0.2)", 17, 20, 0.25, -1, StragglerKind::kLink}).ok()) << "a link";
  EXPECT_TRUE(CheckStraggler({-1, "node 1 (vm, 10.0.0.2)", 17, 20, 0.25, -1, StragglerKind::kLink}).ok());
  for (const StragglerStatus& bad : std::vector<StragglerStatus>{
           {-1, "", 17, 20, 0.25, 1, StragglerKind::kNode},  // a node verdict without the node
           {-1, "h", 17, 20, 0.25, 1},                 // a rank verdict without the rank
           {3, "h", 17, 20, 0.25, 1, StragglerKind::kNode},  // a node verdict naming a rank
           {-1, "", 17, 20, 0.25, 1, StragglerKind::kLink},  // a link near nothing
           {3, "h", 17, 20, 0.25, 1, static_cast<StragglerKind>(9)},  // no such kind
           {-2, "h", 17, 20, 0.25, 1},                 // no such rank
           {3, "h\n", 17, 20, 0.25, 1},                // not printable
           {3, std::string(65, 'h'), 17, 20, 0.25, 1}, // too long
           {3, "h", 21, 20, 0.25, 1},                  // last in more steps than the window
           {3, "h", 1, 0, 0.25, 1},                    // no window
           {3, "h", 1, 20, std::nan(""), 1},           // cost not a number
           {3, "h", 1, 20, 1.5, 1},                    // over everything
           {3, "h", 1, 20, 0.5, -7}}) {                // a step before any
    EXPECT_EQ(CheckStraggler(bad).code(), absl::StatusCode::kInvalidArgument) << bad.global_rank << " " << bad.host;
  }
}

TEST(StatusTableTest, HumanSizesAndDurations) {
  EXPECT_EQ(HumanBytes(-1), "-");
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanSeconds(3.25), "3.2s");
  EXPECT_EQ(HumanSeconds(125), "2m05s");
  EXPECT_EQ(HumanSeconds(7260), "2h01m");
  EXPECT_EQ(HumanSeconds(std::nan("")), "-");
}

TEST(PrometheusTest, EveryFamilyIsTypedAndLabelValuesAreEscaped) {
  NodeStatus node = TwoNodes().nodes[0];
  node.host = "a\"b\\c";
  node.ranks[1].gpu_util_percent = 55;
  node.ranks[1].snapshot_step = 12;
  const std::string text = RenderPrometheus("run\n1", node, AgentCounters{3, 1, 2, 1});
  EXPECT_NE(text.find("dtrun_snapshot_step{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\",rank=\"1\",local_rank=\"1\"} 12\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE dtrun_restarts_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("dtrun_worker_oom_kills_total{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dtrun_rounds_total{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("dtrun_step{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\",rank=\"1\",local_rank=\"1\"} 12\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("dtrun_workers{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\",state=\"running\"} 2\n"), std::string::npos);
  // Unknown numbers are left out rather than written as -1.
  EXPECT_EQ(text.find("dtrun_worker_gpu_utilization_percent{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\",rank=\"0\""),
            std::string::npos);
  EXPECT_NE(text.find(",rank=\"1\",local_rank=\"1\"} 55\n"), std::string::npos);
  // No straggler: the gauges say so.
  EXPECT_NE(text.find("dtrun_straggler_rank{run_id=\"run\\n1\",host=\"a\\\"b\\\\c\"} -1\n"), std::string::npos) << text;
  node.ranks[0].sync_wait_s = 0.25;
  const std::string named = RenderPrometheus("r", node, AgentCounters{}, StragglerStatus{3, "x", 9, 10, 0.5});
  EXPECT_NE(named.find("dtrun_straggler_rank{run_id=\"r\",host=\"a\\\"b\\\\c\"} 3\n"), std::string::npos) << named;
  EXPECT_NE(named.find("dtrun_straggler_cost_ratio{run_id=\"r\",host=\"a\\\"b\\\\c\"} 0.5\n"), std::string::npos) << named;
  EXPECT_NE(named.find("dtrun_straggler_kind{run_id=\"r\",host=\"a\\\"b\\\\c\",kind=\"rank\"} 1\n"), std::string::npos) << named;
  EXPECT_NE(named.find("dtrun_straggler_kind{run_id=\"r\",host=\"a\\\"b\\\\c\",kind=\"link\"} 0\n"), std::string::npos) << named;
  EXPECT_NE(named.find("dtrun_sync_wait_seconds{run_id=\"r\",host=\"a\\\"b\\\\c\",rank=\"0\",local_rank=\"0\"} 0.25\n"),
            std::string::npos) << named;
  // Every sample line is NAME{LABELS} VALUE.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line[0] == '#') continue;
    EXPECT_NE(line.find("} "), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace dtrun::status

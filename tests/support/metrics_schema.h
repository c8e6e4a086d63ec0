// Checks a trainer's metrics.jsonl against worker/metrics_schema.json, the one list of the names
// the trainers write and dtplot reads.
#pragma once

#include <string>

namespace dtrun::testing {

// Every line of `metrics_jsonl` is a JSON object of a kind the schema lists, with "time" and
// only names the schema lists for that kind. Adds GoogleTest failures naming the line and name.
void ExpectMetricsFollowSchema(const std::string& metrics_jsonl);

}  // namespace dtrun::testing

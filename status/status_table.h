// `dtrun status`'s human form: a header line for the job, then one row per rank. Unknown values
// print as "-". Ages are as the JobStatus says (see AgeTo).
#pragma once

#include <string>

#include "status/node_status.h"

namespace dtrun::status {

std::string RenderTable(const JobStatus& job);  // RenderHeader + RenderRows
std::string RenderHeader(const JobStatus& job);  // phase, round, restarts, nodes, ranks, step; the straggler
std::string RenderRows(const JobStatus& job);    // the column titles, then a row per rank

// "1.5 KiB"-style sizes and "2m05s"-style durations, as the table and the progress line print them.
std::string HumanBytes(int64_t bytes);
std::string HumanSeconds(double seconds);

}  // namespace dtrun::status

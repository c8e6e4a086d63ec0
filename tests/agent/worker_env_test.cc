#include "agent/worker_env.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

std::map<std::string, std::string> AsMap(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const std::string& e : env) m[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return m;
}

TEST(WorkerEnvTest, SetsTorchrunVariables) {
  AgentOptions o;
  o.nproc_per_node = 4;
  o.max_restarts = 3;
  o.run_id = "job";
  o.launch_id = "L";
  WorkerIdentity id{2, 2, 4, 1, 0, 1, "localhost", 12345, "/tmp/e.json", "", ""};
  auto env = AsMap(BuildWorkerEnv({{"PATH", "/bin"}, {"RANK", "stale"}}, o, id));
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["LOCAL_RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(env["GROUP_RANK"], "0");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
  EXPECT_EQ(env["ROLE_RANK"], "2");
  EXPECT_EQ(env["ROLE_WORLD_SIZE"], "4");
  EXPECT_EQ(env["ROLE_NAME"], "default");
  EXPECT_EQ(env["MASTER_ADDR"], "localhost");
  EXPECT_EQ(env["MASTER_PORT"], "12345");
  EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1");
  EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
  EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
  EXPECT_EQ(env["TORCHELASTIC_ERROR_FILE"], "/tmp/e.json");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
  EXPECT_EQ(env["DTRUN_LAUNCH_ID"], "L");
  EXPECT_EQ(env["PATH"], "/bin");
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);
}

// The Python module comes with the libxxhash dtrun loaded, which its snapshots hash with.
TEST(WorkerEnvTest, ThePythonModuleIsAppendedWithDtrunsLibxxhash) {
  AgentOptions o;
  o.python_dir = "/opt/dtrun/lib/dtrun/python";
  o.xxhash_library = "/opt/dtrun/lib/libxxhash.so.0";
  WorkerIdentity id{0, 0, 1, 0, 0, 1, "localhost", 12345, "/tmp/e.json", "", ""};
  auto env = AsMap(BuildWorkerEnv({{"PYTHONPATH", "/mine"}}, o, id));
  EXPECT_EQ(env["PYTHONPATH"], "/mine:/opt/dtrun/lib/dtrun/python");
  EXPECT_EQ(env["DTRUN_XXHASH_LIBRARY"], "/opt/dtrun/lib/libxxhash.so.0");
  o.python_dir.clear();  // no module installed: nothing for it
  env = AsMap(BuildWorkerEnv({}, o, id));
  EXPECT_EQ(env.count("PYTHONPATH"), 0u);
  EXPECT_EQ(env.count("DTRUN_XXHASH_LIBRARY"), 0u);
}

TEST(WorkerEnvTest, HangEvidenceIsOnUnlessTheUserChoseOtherwise) {
  AgentOptions o;
  WorkerIdentity id{0, 0, 1, 0, 0, 1, "localhost", 1, "/tmp/e.json", "", ""};
  auto plain = AsMap(BuildWorkerEnv({}, o, id));
  EXPECT_EQ(plain["PYTHONFAULTHANDLER"], "1");
  EXPECT_EQ(plain.count("TORCH_NCCL_DUMP_ON_TIMEOUT"), 0u);  // no log dir: nowhere to keep dumps
  id.log_dir = "/logs/run/attempt_2/0";
  auto logged = AsMap(BuildWorkerEnv({{"TORCH_NCCL_TRACE_BUFFER_SIZE", "50"}, {"PYTHONFAULTHANDLER", ""}}, o, id));
  EXPECT_EQ(logged["TORCH_NCCL_DUMP_ON_TIMEOUT"], "1");
  EXPECT_EQ(logged["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], "/logs/run/attempt_2/0/nccl_trace_rank_");
  EXPECT_EQ(logged["TORCH_NCCL_TRACE_BUFFER_SIZE"], "50");  // the user's
  EXPECT_EQ(logged["PYTHONFAULTHANDLER"], "");             // the user's: off
}

TEST(WorkerEnvTest, UserSettingsOfTunablesWin) {
  AgentOptions o;
  o.set_omp_num_threads = true;
  auto env = AsMap(BuildWorkerEnv({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}, o, WorkerIdentity{}));
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "1");
  auto env2 = AsMap(BuildWorkerEnv({{"OMP_NUM_THREADS", "8"}}, o, WorkerIdentity{}));
  EXPECT_EQ(env2["OMP_NUM_THREADS"], "8");
}

}  // namespace
}  // namespace dtrun

namespace dtrun {
namespace {

TEST(WorkerEnvTest, LocalAddressInterfaceIsExportedUnlessUserChoseOne) {
  AgentOptions o;
  o.socket_ifname = "eth1";
  auto env = AsMap(BuildWorkerEnv({}, o, WorkerIdentity{}));
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "eth1");
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "eth1");
  auto user = AsMap(BuildWorkerEnv({{"GLOO_SOCKET_IFNAME", "ib0"}}, o, WorkerIdentity{}));
  EXPECT_EQ(user["GLOO_SOCKET_IFNAME"], "ib0");
}

}  // namespace
}  // namespace dtrun

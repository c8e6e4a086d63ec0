#include "worker/dist_env.h"

#include <cstdlib>
#include <string>

namespace dtrun::worker {
namespace {

int IntEnv(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

}  // namespace

DistEnv ReadDistEnv() {
  DistEnv e;
  e.rank = IntEnv("RANK", 0);
  e.world_size = IntEnv("WORLD_SIZE", 1);
  e.local_rank = IntEnv("LOCAL_RANK", 0);
  e.local_world_size = IntEnv("LOCAL_WORLD_SIZE", 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = IntEnv("MASTER_PORT", 0);
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  e.use_agent_store = agent_store && std::string(agent_store) == "True";
  e.restart_count = IntEnv("TORCHELASTIC_RESTART_COUNT", 0);
  return e;
}

}  // namespace dtrun::worker

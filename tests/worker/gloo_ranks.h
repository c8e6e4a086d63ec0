// Several ranks of a job inside one test: each in its own thread with its own Gloo group over one
// in-memory store, as separate processes would have over the job's TCPStore. For the worker
// library's collective logic (worker/step_agreement.h, worker/ddp.h) without launching processes.
// Only where this LibTorch has Gloo's headers (DTRUN_WITH_GLOO; pip's wheels do not).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "worker/process_group.h"
#include "worker/torch_compat.h"

#if DTRUN_WITH_GLOO
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace dtrun::worker::testing {

// Runs `body(rank, group)` for every rank of `world` at once; returns each rank's exception message
// ("" where none was thrown). Every collective is bounded by Gloo's 60 s timeout.
inline std::vector<std::string> OnEveryRank(int world, const std::function<void(int, ProcessGroupHandle&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        ProcessGroupHandle pg;
        pg.store = store;
        pg.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, world, options);
        body(r, pg);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "an exception without a message";
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace dtrun::worker::testing
#endif

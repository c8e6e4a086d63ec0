#include "launcher/numa_binding.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `nodes` NUMA nodes of `cores` physical cores each, two hardware threads per core: CPU c's sibling
// is c + nodes * cores (the numbering Linux gives most x86 servers). `nodes_per_socket` nodes share
// a socket; each node's cores are split into `l3_per_node` L3 domains.
CpuTopology Machine(int nodes, int cores, int nodes_per_socket = 1, int l3_per_node = 1) {
  CpuTopology t;
  const int first_threads = nodes * cores;
  for (int thread = 0; thread < 2; ++thread) {
    for (int c = 0; c < first_threads; ++c) {
      Cpu cpu;
      cpu.id = c + thread * first_threads;
      cpu.node = c / cores;
      cpu.package = cpu.node / nodes_per_socket;
      cpu.core = c;
      const int per_l3 = cores / l3_per_node;
      cpu.l3 = cpu.node * cores + (c % cores) / per_l3 * per_l3;
      t.cpus.push_back(cpu);
    }
  }
  return t;
}

std::vector<GpuSeat> Gpus(std::vector<int> nodes) {
  std::vector<GpuSeat> out;
  for (size_t i = 0; i < nodes.size(); ++i) out.push_back({"0000:" + std::to_string(10 + i) + ":00.0", nodes[i]});
  return out;
}

std::vector<int> Cpus(const absl::StatusOr<std::vector<WorkerCpus>>& plan, int rank) {
  return (*plan)[static_cast<size_t>(rank)].cpus;
}

TEST(NumaBindingTest, NodeModePutsEachWorkerOnEveryCpuOfItsGpusNode) {
  // Two sockets of 4 cores (CPUs 0-7, siblings 8-15); GPUs 0,1 on node 0 and 2,3 on node 1.
  auto plan = PlanNumaBinding(NumaMode::kNode, 4, Machine(2, 4), Gpus({0, 0, 1, 1}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 0), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  EXPECT_EQ(Cpus(plan, 1), Cpus(plan, 0));
  EXPECT_THAT(Cpus(plan, 3), ElementsAre(4, 5, 6, 7, 12, 13, 14, 15));
  EXPECT_EQ((*plan)[2].where, "NUMA node 1, GPU 0000:12:00.0");
}

TEST(NumaBindingTest, AWorkerFollowsItsGpuNotItsRank) {
  // GPUs wired crosswise (as on some 8-GPU boards): rank 0's GPU is on node 1.
  auto plan = PlanNumaBinding(NumaMode::kNode, 2, Machine(2, 4), Gpus({1, 0}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 0), ElementsAre(4, 5, 6, 7, 12, 13, 14, 15));
  EXPECT_THAT(Cpus(plan, 1), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
}

TEST(NumaBindingTest, SocketModeTakesEveryNodeOfTheSocket) {
  // One socket of two NUMA nodes (sub-NUMA clustering), a second socket likewise.
  auto plan = PlanNumaBinding(NumaMode::kSocket, 4, Machine(4, 2, /*nodes_per_socket=*/2), Gpus({0, 1, 2, 3}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 1), ElementsAre(0, 1, 2, 3, 8, 9, 10, 11));
  EXPECT_THAT(Cpus(plan, 2), ElementsAre(4, 5, 6, 7, 12, 13, 14, 15));
}

TEST(NumaBindingTest, ExclusiveModeSharesANodesPhysicalCoresOutWithTheirThreads) {
  auto plan = PlanNumaBinding(NumaMode::kExclusive, 4, Machine(2, 4), Gpus({0, 0, 1, 1}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 0), ElementsAre(0, 1, 8, 9));
  EXPECT_THAT(Cpus(plan, 1), ElementsAre(2, 3, 10, 11));
  EXPECT_THAT(Cpus(plan, 2), ElementsAre(4, 5, 12, 13));
  EXPECT_THAT(Cpus(plan, 3), ElementsAre(6, 7, 14, 15));
  // Three workers on a node of four cores: shares of 1, 1 and 2 cores, none shared.
  auto three = PlanNumaBinding(NumaMode::kExclusive, 3, Machine(1, 4), Gpus({0, 0, 0}));
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_THAT(Cpus(three, 0), ElementsAre(0, 4));
  EXPECT_THAT(Cpus(three, 1), ElementsAre(1, 5));
  EXPECT_THAT(Cpus(three, 2), ElementsAre(2, 3, 6, 7));
}

TEST(NumaBindingTest, CoreComplexModeGivesEachWorkerAnL3OfItsNodeAndSharesOnlyWhenThereAreTooFew) {
  // Node 0: L3 domains of cores {0,1} and {2,3}.
  auto plan = PlanNumaBinding(NumaMode::kCoreComplex, 3, Machine(1, 4, 1, /*l3_per_node=*/2), Gpus({0, 0, 0}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 0), ElementsAre(0, 1, 4, 5));
  EXPECT_THAT(Cpus(plan, 1), ElementsAre(2, 3, 6, 7));
  EXPECT_EQ(Cpus(plan, 2), Cpus(plan, 0));
  EXPECT_THAT((*plan)[1].where, HasSubstr("L3 of CPU 2"));
}

TEST(NumaBindingTest, WithoutGpusTheWorkersAreSpreadOverTheNodesInOrder) {
  auto four = PlanNumaBinding(NumaMode::kNode, 4, Machine(2, 4), {});
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(Cpus(four, 0), Cpus(four, 1));
  EXPECT_THAT(Cpus(four, 2), ElementsAre(4, 5, 6, 7, 12, 13, 14, 15));
  EXPECT_EQ((*four)[3].where, "NUMA node 1, no GPU");
  auto three = PlanNumaBinding(NumaMode::kExclusive, 3, Machine(2, 4), {});
  ASSERT_TRUE(three.ok()) << three.status();
  EXPECT_THAT(Cpus(three, 0), ElementsAre(0, 1, 8, 9));
  EXPECT_THAT(Cpus(three, 1), ElementsAre(2, 3, 10, 11));
  EXPECT_THAT(Cpus(three, 2), ElementsAre(4, 5, 6, 7, 12, 13, 14, 15));
}

TEST(NumaBindingTest, OnlyTheCpusThisProcessMayUseAreHandedOut) {
  CpuTopology t = Machine(2, 4);
  auto drop = [&t](auto unwanted) {
    t.cpus.erase(std::remove_if(t.cpus.begin(), t.cpus.end(), unwanted), t.cpus.end());
  };
  drop([](const Cpu& c) { return c.id >= 8; });  // Slurm gave us no hyperthreads
  auto plan = PlanNumaBinding(NumaMode::kNode, 2, t, Gpus({0, 1}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Cpus(plan, 1), ElementsAre(4, 5, 6, 7));
  drop([](const Cpu& c) { return c.node == 1; });
  EXPECT_THAT(PlanNumaBinding(NumaMode::kNode, 2, t, Gpus({0, 1})).status().message(),
              HasSubstr("GPU 0000:11:00.0 is on NUMA node 1, where this process may run on no CPU"));
}

TEST(NumaBindingTest, WhatCannotBeHonouredIsAnErrorThatSaysWhatToDo) {
  EXPECT_THAT(PlanNumaBinding(NumaMode::kNode, 4, Machine(2, 4), Gpus({0, 1})).status().message(),
              HasSubstr("4 workers but 2 visible GPUs"));
  EXPECT_THAT(PlanNumaBinding(NumaMode::kNode, 2, Machine(2, 4), Gpus({0, -1})).status().message(),
              HasSubstr("/sys/bus/pci/devices/0000:11:00.0/numa_node is -1"));
  EXPECT_THAT(
      PlanNumaBinding(NumaMode::kExclusive, 3, Machine(1, 2), Gpus({0, 0, 0})).status().message(),
      HasSubstr("--numa-binding exclusive: NUMA node 0 has 2 physical cores for 3 workers; use --numa-binding node"));
  // One node: a GPU the kernel places nowhere is on it.
  auto single = PlanNumaBinding(NumaMode::kNode, 1, Machine(1, 2), Gpus({-1}));
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_THAT(Cpus(single, 0), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(PlanNumaBinding(NumaMode::kNode, 1, CpuTopology{}, {}).status().message(), HasSubstr("no CPU"));
}

TEST(NumaBindingTest, ModesAreTorchrunsSpellings) {
  EXPECT_EQ(*ParseNumaMode("node"), NumaMode::kNode);
  EXPECT_EQ(*ParseNumaMode("SOCKET"), NumaMode::kSocket);
  EXPECT_EQ(*ParseNumaMode("exclusive"), NumaMode::kExclusive);
  EXPECT_EQ(*ParseNumaMode("core-complex"), NumaMode::kCoreComplex);
  EXPECT_EQ(*ParseNumaMode("core_complex"), NumaMode::kCoreComplex);
  EXPECT_THAT(ParseNumaMode("numa").status().message(),
              HasSubstr("--numa-binding numa: expected node, socket, exclusive or core-complex"));
}

// Made-up machines by the hundred (a fixed seed): whatever a mode hands out is non-empty, lies in
// the worker's node (its socket for `socket`), and `exclusive` never gives two workers one CPU.
TEST(NumaBindingTest, OnAnyMachineEachWorkerGetsCpusOfItsOwnNodeAndExclusiveSharesNone) {
  std::mt19937 rng(46);
  auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    CpuTopology t = Machine(pick(1, 4), pick(1, 6) * 2, pick(1, 2), pick(1, 2));
    t.cpus.erase(std::remove_if(t.cpus.begin(), t.cpus.end(), [&](const Cpu&) { return pick(0, 4) == 0; }),
                 t.cpus.end());  // an affinity mask with holes
    std::set<int> nodes;
    for (const Cpu& c : t.cpus) nodes.insert(c.node);
    if (nodes.empty()) continue;
    std::vector<GpuSeat> gpus;
    const int ngpus = pick(0, 6);
    for (int g = 0; g < ngpus; ++g) {
      gpus.push_back(
          {"gpu" + std::to_string(g), *std::next(nodes.begin(), pick(0, static_cast<int>(nodes.size()) - 1))});
    }
    const int nproc = pick(1, std::max(1, ngpus == 0 ? 6 : ngpus));
    for (NumaMode mode : {NumaMode::kNode, NumaMode::kSocket, NumaMode::kExclusive, NumaMode::kCoreComplex}) {
      auto plan = PlanNumaBinding(mode, nproc, t, gpus);
      if (!plan.ok()) {
        EXPECT_EQ(mode, NumaMode::kExclusive) << plan.status();  // the only mode that can run short
        EXPECT_THAT(plan.status().message(), HasSubstr("physical core"));
        continue;
      }
      ASSERT_EQ(plan->size(), static_cast<size_t>(nproc));
      std::map<int, Cpu> by_id;
      for (const Cpu& c : t.cpus) by_id[c.id] = c;
      std::map<int, int> owner;  // exclusive: CPU -> the rank holding it
      for (int r = 0; r < nproc; ++r) {
        const std::vector<int>& mine = (*plan)[static_cast<size_t>(r)].cpus;
        ASSERT_FALSE(mine.empty()) << "trial " << trial << " rank " << r;
        const int home = gpus.empty() ? by_id[mine.front()].node : gpus[static_cast<size_t>(r)].numa_node;
        int home_package = -1;
        for (const Cpu& c : t.cpus) {
          if (c.node == home) home_package = c.package;
        }
        for (int cpu : mine) {
          ASSERT_TRUE(by_id.count(cpu)) << "a CPU outside the mask, trial " << trial;
          if (mode == NumaMode::kSocket) {
            EXPECT_EQ(by_id[cpu].package, home_package) << "trial " << trial;
          } else {
            EXPECT_EQ(by_id[cpu].node, home) << "trial " << trial;
          }
          if (mode == NumaMode::kExclusive) {
            EXPECT_TRUE(owner.emplace(cpu, r).second) << "trial " << trial;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrun

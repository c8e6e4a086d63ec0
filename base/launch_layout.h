// Where a launch keeps its files, spelled in one place. Under the runtime directory
// (base/runtime_dir.h): <launch id>.json, the entry `dtrun kill` and `dtrun status` read, and
// <launch id>/, the launch's private directory (progress sockets, the status snapshot, FileTimer's
// pipe), removed when it ends. Under the error root (the log root, else the private directory) and
// the log root: attempt_<round>/<local rank>/ for each worker (error.json, stacks.txt; its logs).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace dtrun::launch_layout {

// "<pid>-<8 hex digits>": a new launch's id (its entry's and directory's name) for this process.
std::string NewLaunchId();
// The pid in a name of that form, or -1 for any other name.
pid_t PidOfLaunchId(const std::string& name);

std::string RegistryEntry(const std::string& runtime_dir, const std::string& launch_id);
std::string LaunchDir(const std::string& runtime_dir, const std::string& launch_id);

// In the launch's private directory.
std::string ProgressSocket(const std::string& launch_dir, int local_rank);
std::string StatusSnapshot(const std::string& launch_dir);
std::string TimerFile(const std::string& launch_dir);
std::string TokenFile(const std::string& launch_dir);  // a -H launcher's job token (0600)

// Under an error or log root.
std::string AttemptDir(const std::string& root, int64_t round);
std::string RankDir(const std::string& root, int64_t round, int local_rank);
std::string ErrorFile(const std::string& rank_dir);
std::string StacksFile(const std::string& rank_dir);

}  // namespace dtrun::launch_layout

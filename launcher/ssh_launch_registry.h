// A `dtrun -H` launcher's entry in this user's launch registry (agent/run_registry.h), so that on
// the machine it runs on `dtrun status` shows every host's workers (it asks the job's rendezvous,
// with the token kept in the launch's private directory) and `dtrun kill` stops the whole job (it
// signals the launcher, which passes the signal to every host). Removed when the launcher ends; a
// launcher that was killed leaves it to the next dtrun's clean-up of gone launches.
#pragma once

#include <string>

#include "launcher/ssh_launch_plan.h"

namespace dtrun {

class SshLaunchRegistration {
 public:
  // Registers; a failure is a warning (the job runs without `dtrun status` on this machine).
  SshLaunchRegistration(const SshLaunch& launch, const std::string& command_line);
  ~SshLaunchRegistration();
  SshLaunchRegistration(const SshLaunchRegistration&) = delete;
  SshLaunchRegistration& operator=(const SshLaunchRegistration&) = delete;

 private:
  std::string entry_;  // the record's path ("" if none was written)
  std::string dir_;    // the launch's private directory ("" if none was made)
};

}  // namespace dtrun

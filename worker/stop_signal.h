// A trainer's stop request: SIGTERM, and Slurm's warning before preemption (sbatch
// --signal=USR1@120, forwarded by dtrun), SIGUSR1/SIGUSR2. The handler only sets flags; the
// training loop all-reduces the flag each step, checkpoints and exits with 128 + the signal.
#pragma once

namespace dtrun::worker {

void InstallStopSignalHandlers();
bool StopRequested();
int StopSignal();  // the last stop signal received (SIGTERM before any)

}  // namespace dtrun::worker

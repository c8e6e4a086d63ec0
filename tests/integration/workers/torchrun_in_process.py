# A wrapper that runs torchrun inside its own process, as `accelerate launch` and `tune run` do:
# torch.distributed.run.main(argv), here after dtrun.patch_torchrun(). The workers print whether
# dtrun started them (DTRUN_LAUNCH_ID is dtrun's marker on every worker).
import sys

import torch.distributed.run

import dtrun

dtrun.patch_torchrun()
torch.distributed.run.main(["--nproc_per_node", "2", "--no_python", "/bin/sh", "-c",
                            'echo "WORKER $RANK of $WORLD_SIZE dtrun=${DTRUN_LAUNCH_ID:+yes}"'] + sys.argv[1:])

# A caller of the elastic_launch API, written as for torch.distributed.launcher.api (flytekit and
# notebook launchers call it so): a function run on every rank, its return values back, a
# failure raised as ChildFailedError.
#   elastic_launch_caller.py dtrun|torch
import os
import sys

import torch
import torch.distributed as dist

if sys.argv[1] == "dtrun":
    from dtrun import ChildFailedError, LaunchConfig, elastic_launch
else:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch


def all_reduce_sum(scale):
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {"rank": int(os.environ["RANK"]), "sum": t.item() * scale}


def fail_on_rank_one():
    if os.environ["RANK"] == "1":
        raise ValueError("rank one gives up")
    return "fine"


if __name__ == "__main__":
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id="caller", rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1)
    out = elastic_launch(config, all_reduce_sum)(10)
    print("RESULTS", sorted((rank, v["rank"], v["sum"]) for rank, v in out.items()), flush=True)
    try:
        elastic_launch(config, fail_on_rank_one)()
        print("NO FAILURE RAISED", flush=True)
    except ChildFailedError as e:
        print("CHILD FAILED", type(e).__module__, "rank one gives up" in str(e), flush=True)

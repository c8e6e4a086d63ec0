"""Real PyTorch job debugged the everyday way: rank 1 stops in breakpoint() while rank 0 waits in
a gloo barrier. Prints 'DONE rank=R secret=S' once both pass the barrier."""
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
secret = 40 + 2 + rank
if rank == 1:
    breakpoint()
    secret += 1000  # the session continues past the breakpoint
dist.barrier()
print(f"DONE rank={rank} secret={secret}", flush=True)
dist.destroy_process_group()

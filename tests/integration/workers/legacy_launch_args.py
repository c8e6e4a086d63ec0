"""A torch.distributed.launch-era script: --local_rank from the launcher, then a config file and an
argparse.REMAINDER list of overrides (as the detection codebases of that era parse them)."""
import argparse

p = argparse.ArgumentParser()
p.add_argument("--local_rank", "--local-rank", type=int, default=0)
p.add_argument("--cfg")
p.add_argument("opts", nargs=argparse.REMAINDER)
a = p.parse_args()
print(f"local_rank={a.local_rank} cfg={a.cfg} opts={a.opts}", flush=True)

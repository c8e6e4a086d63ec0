# Every TCPStore request a PyTorch 2.x client makes, against dtrun's agent-hosted store: gloo's
# init_process_group and all_reduce, then set/wait/get/add/compare_set/append/multi_set/multi_get/
# check/delete_key/num_keys. Run under Debian trixie's torch 2.6 in the trixie chroot
# (tests/integration/torch2x_store_test.cc). That build has no libuv and its agent-store path asks
# for libuv all the same, so the client is made here with use_libuv=False and handed to
# init_process_group under torchrun's own prefix.
import datetime, os
import torch, torch.distributed as dist
r, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                  timeout=datetime.timedelta(seconds=30), use_libuv=False)
dist.init_process_group("gloo", store=dist.PrefixStore("/worker/attempt_" + os.environ["TORCHELASTIC_RESTART_COUNT"], s),
                        rank=r, world_size=ws, timeout=datetime.timedelta(seconds=60))
t = torch.tensor([r + 1.0]); dist.all_reduce(t)
s.set(f"k{r}", f"v{r}")
s.wait(["k0", "k1"])
assert s.get(f"k{1-r}") == f"v{1-r}".encode()
s.add("counter", 1)
dist.barrier()
if r == 0:
    assert s.add("counter", 0) == 2
    assert s.compare_set("cs", "", "first") == b"first"
    s.append("ap", "a"); s.append("ap", "b"); assert s.get("ap") == b"ab"
    s.multi_set(["m1", "m2"], ["x", "y"]); assert s.multi_get(["m1", "m2"]) == [b"x", b"y"]
    assert s.check(["m1"]) and not s.check(["nope"])
    assert s.delete_key("m1") and not s.check(["m1"])
    assert s.num_keys() > 0
dist.barrier()
print("STORE2X_OK", r, torch.__version__, t.item(), flush=True)

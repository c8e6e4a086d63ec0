# Every request Debian's torch 1.13 TCPStore client makes (no VALIDATE; WATCH_KEY 7, DELETE_KEY 8),
# against dtrun's agent-hosted store; a WAIT that times out sends no CANCEL_WAIT in 1.13, and the
# connection must keep working after it.
import datetime, os
import torch.distributed as dist
r = int(os.environ["RANK"])
s = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                  timeout=datetime.timedelta(seconds=30))
s.set(f"k{r}", f"v{r}")
s.wait(["k0", "k1"])
assert s.get(f"k{1-r}") == f"v{1-r}".encode()
assert s.add("counter", 1) in (1, 2)
if r == 0:
    assert s.compare_set("cs", "", "first") == b"first"
    assert s.compare_set("cs", "first", "second") == b"second"
    assert s.delete_key("cs") and not s.delete_key("cs")
    try:
        s.wait(["never"], datetime.timedelta(milliseconds=300))
        raise SystemExit("a wait for a missing key returned")
    except RuntimeError:
        pass
    s.set("after", "x")
    assert s.get("after") == b"x" and s.num_keys() > 0
print("STORE1X_OK", r, flush=True)

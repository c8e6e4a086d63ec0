#!/usr/bin/env python3
"""GPU numbers in `dtrun status`: runs a one-rank CUDA job under dtrun that holds about 1 GiB and
keeps the GPU busy while reporting steps, asks `dtrun status --json` once the rows carry GPU
numbers (bounded), prints that rank's row and exits 1 if NVML gave no GPU memory for it.

  status_gpu.py BUILD_DIR            (run by scripts/gpu-check.sh)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

WORKER = r'''
import time, torch, dtrun
x = torch.empty(256 * 2**20, dtype=torch.float32, device="cuda")  # 1 GiB
a = torch.randn(4096, 4096, device="cuda")
end = time.time() + 25
step = 0
while time.time() < end:
    for _ in range(10):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    dtrun.heartbeat(step, samples=step * 64)
    step += 1
'''


def main():
    build = os.path.abspath(sys.argv[1])
    dtrun = os.path.join(build, "bin", "dtrun")
    env = dict(os.environ, DTRUN_RUNTIME_DIR=tempfile.mkdtemp(), PYTHON_EXEC=sys.executable)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(WORKER)
    job = subprocess.Popen([dtrun, "--standalone", "--no-progress-line", f.name], env=env)
    row = None
    deadline = time.time() + 20
    while time.time() < deadline and job.poll() is None:
        out = subprocess.run([dtrun, "status", "--json"], env=env, capture_output=True, text=True).stdout
        for line in out.splitlines():
            for node in json.loads(line)["nodes"]:
                for r in node["ranks"]:
                    if r.get("gpu_mem_bytes") and r.get("step") is not None:
                        row = r
        if row:
            break
        time.sleep(1)
    job.terminate()
    job.wait()
    print(json.dumps(row) if row else "no GPU numbers in dtrun status within 20 s")
    return 0 if row and row["gpu_mem_bytes"] >= 2**30 else 1


if __name__ == "__main__":
    sys.exit(main())

# Rank 1 attacks its agent's progress socket while rank 0 trains and reports normally: a flood
# of valid and malformed datagrams, oversized ones, binary junk, passed file descriptors, and
# reports from a process outside the worker's process group. The agent must carry on.
import array
import os
import socket
import subprocess
import sys
import time

import dtrun

path = os.environ["DTRUN_PROGRESS_SOCKET"]
rank = int(os.environ["RANK"])
if rank == 0:
    for step in range(30):
        dtrun.heartbeat(step, samples=step)
        time.sleep(0.1)
    print("rank 0 reported 30 steps", flush=True)
    sys.exit(0)

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setblocking(False)
junk = [b"", b"beat step=-4", b"\xff\xfe\x00", b"x" * 100000, b"begin name=" + b"a" * 500,
        b"beat step=99999999999999999999999", b"end", b"hello stack_signal=9", b"beat step=1 " * 60]
sent = 0
deadline = time.monotonic() + 2.5
while time.monotonic() < deadline:
    for j in junk:
        try:
            s.sendto(j, path)
            sent += 1
        except OSError:
            pass
    try:
        fds = array.array("i", [0, 1, 2])
        s.sendmsg([b"beat step=5"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], 0, path)
    except OSError:
        pass
# A process of its own session (not in the worker's group) claims to be a worker.
subprocess.run([sys.executable, "-c",
                "import socket,os; s=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
                "[s.sendto(b'begin name=step', os.environ['DTRUN_PROGRESS_SOCKET']) for _ in range(100)]"],
               start_new_session=True, check=True)
print("rank 1 sent %d hostile datagrams" % sent, flush=True)

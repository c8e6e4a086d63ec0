# A Python worker that can be started parked (dtrun.await_round): prints
# "pyprobe rank=R restart=N pid=P park_fd=set|unset environ_park=yes|no" once it has its round,
# reports step 1, then waits to be stopped unless its restart count is argv[1] or more (exits 0).
import os
import signal
import sys

import dtrun

dtrun.await_round()  # after the imports, before anything reads the round
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open("/proc/self/environ", "rb") as f:
    environ_park = b"DTRUN_PARK_FD=" in f.read()
print("pyprobe rank=%s restart=%d pid=%d park_fd=%s environ_park=%s" %
      (os.environ["RANK"], restart, os.getpid(), "set" if "DTRUN_PARK_FD" in os.environ else "unset",
       "yes" if environ_park else "no"), flush=True)
dtrun.heartbeat(1)
if restart >= int(sys.argv[1]):
    sys.exit(0)
signal.pause()  # until the test kills a rank and dtrun stops the rest

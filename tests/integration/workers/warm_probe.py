# A Python worker that can be started parked (dtrun.await_round): prints
# "pyprobe rank=R restart=N pid=P park_fd=set|unset environ_park=yes|no child=alive|dead|none" once
# it has its round, reports step 1, then waits to be stopped unless its restart count is argv[1] or
# more (exits 0). With argv[2], a directory: started parked, it first starts a child of its own
# (`sleep`, in its process group, as a pyenv shim's subshell would be) and writes
# DIR/parked-PID, then awaits its round; `child` says whether that child is still alive then.
import os
import signal
import subprocess
import sys

import dtrun

child = None
if len(sys.argv) > 2 and "DTRUN_PARK_FD" in os.environ:
    child = subprocess.Popen(["sleep", "600"])
    with open(os.path.join(sys.argv[2], "parked-%d" % os.getpid()), "w"):
        pass
dtrun.await_round()  # after the imports, before anything reads the round
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open("/proc/self/environ", "rb") as f:
    environ_park = b"DTRUN_PARK_FD=" in f.read()
print("pyprobe rank=%s restart=%d pid=%d park_fd=%s environ_park=%s child=%s" %
      (os.environ["RANK"], restart, os.getpid(), "set" if "DTRUN_PARK_FD" in os.environ else "unset",
       "yes" if environ_park else "no", "none" if child is None else "alive" if child.poll() is None else "dead"),
      flush=True)
if child is not None:
    child.kill()
    child.wait()
dtrun.heartbeat(1)
if restart >= int(sys.argv[1]):
    sys.exit(0)
signal.pause()  # until the test kills a rank and dtrun stops the rest

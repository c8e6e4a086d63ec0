# torchelastic's FileTimer, used exactly as under torchrun (TORCHELASTIC_ENABLE_FILE_TIMER=1):
# on the first attempt rank 1 overstays its 1 s timer and the agent kills it.
import os
import time

import torch.distributed.elastic.timer as timer
from torch.distributed.elastic.timer import FileTimerClient

timer.configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with timer.expires(after=1, scope="work"):
    if attempt == 0 and os.environ["RANK"] == "1":
        time.sleep(120)
print("rank %s done in attempt %d" % (os.environ["RANK"], attempt), flush=True)

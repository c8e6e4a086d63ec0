"""A real tqdm progress bar (\\r updates, no newline until it closes) that stops half-way until a
line arrives on stdin, so a test can see whether the bar's state reaches the console meanwhile."""
import sys

from tqdm import tqdm

bar = tqdm(total=4, desc="train", mininterval=0, ascii=True, file=sys.stderr)
bar.update(2)
sys.stdin.readline()
bar.update(2)
bar.close()
print("BAR_DONE", flush=True)

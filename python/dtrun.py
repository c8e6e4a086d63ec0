"""Progress reports from a Python worker to its dtrun agent: heartbeats, sections, stacks.

    import dtrun

    dtrun.total_steps(epochs * len(loader))        # optional: rates and an ETA
    for step, batch in enumerate(loader):
        with dtrun.section("step"):
            train_step(batch)
        dtrun.heartbeat(step, samples=(step + 1) * batch_size)
    with dtrun.section("checkpoint"):
        torch.save(state, path)

With `--heartbeat-timeout` and `--section-timeout NAME=SECONDS`, dtrun declares a rank hung when
its reports stop, collects every rank's stacks (this module lets faulthandler write them when the
agent asks) and restarts the job. Outside dtrun every call does nothing. Reports never block:
one the agent cannot take at once is dropped. The protocol is in dtrun's docs/DESIGN.md.
"""

import contextlib
import faulthandler
import os
import re
import signal
import socket

__all__ = ["enabled", "heartbeat", "section", "begin", "end", "total_steps"]

_PATH = os.environ.get("DTRUN_PROGRESS_SOCKET", "")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")
_sock = None
_stacks_file = None  # kept open: faulthandler writes to its fd from a signal handler

if _PATH:
    try:
        _sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _sock.setblocking(False)
    except OSError:
        _sock = None


def enabled():
    """True when running under dtrun (reports go somewhere)."""
    return _sock is not None


def _send(text):
    if _sock is None:
        return
    try:
        _sock.sendto(text.encode("ascii"), _PATH)
    except OSError:
        pass  # the agent is busy or gone: a report is never worth blocking training


def _count(value, what):
    value = int(value)
    if value < 0:
        raise ValueError("dtrun: %s must be >= 0, got %d" % (what, value))
    return value


def heartbeat(step=None, samples=None):
    """Says the worker is alive; `step` and `samples` (totals so far) give rates and progress."""
    if _sock is None:
        return
    fields = ["beat"]
    if step is not None:
        fields.append("step=%d" % _count(step, "step"))
    if samples is not None:
        fields.append("samples=%d" % _count(samples, "samples"))
    _send(" ".join(fields))


def _checked(name):
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("dtrun: a section name is 1-64 of A-Z a-z 0-9 _ . : - (got %r)" % (name,))
    return name


def begin(name):
    """A named section starts (see section())."""
    name = _checked(name)
    _send("begin name=" + name)


def end(name):
    """The innermost open section called `name` ends."""
    name = _checked(name)
    _send("end name=" + name)


@contextlib.contextmanager
def section(name):
    """`with section("checkpoint"):` -- --section-timeout checkpoint=SECONDS bounds it."""
    begin(name)
    try:
        yield
    finally:
        end(name)


def total_steps(steps):
    """How many steps the job will run, for rates and an ETA."""
    _send("total steps=%d" % _count(steps, "steps"))


def _register_stacks():
    """Lets the agent ask for this process's Python stacks (every thread) without stopping it."""
    global _stacks_file
    path = os.environ.get("DTRUN_STACKS_FILE", "")
    rtmin = getattr(signal, "SIGRTMIN", None)
    if not path or rtmin is None:
        return 0
    signum = rtmin + 6
    if signal.getsignal(signum) != signal.SIG_DFL:
        return 0  # somebody else's signal
    try:
        _stacks_file = open(path, "a")
        faulthandler.register(signum, file=_stacks_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        return 0
    return int(signum)


if _sock is not None:
    _signal = _register_stacks()
    _send("hello lang=python" + (" stack_signal=%d" % _signal if _signal else ""))

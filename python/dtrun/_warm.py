"""Warm starts for Python workers (dtrun's docs/DESIGN.md, "Warm workers"): the release message
the agent writes down the pipe named by DTRUN_PARK_FD, read and checked as the C++ worker library
does (base/park_message.h): "<bytes>\\n" in decimal, then that many bytes of NAME=value entries,
each ended by a NUL. Both ends are dtrun's, but the reader still bounds what it accepts."""

import ctypes
import os

MAX_RELEASE_BYTES = 1 << 20
MAX_HEADER_BYTES = 16  # "<bytes>\n"
PARK_FD = "DTRUN_PARK_FD"
WARM_FD = "DTRUN_WARM_FD"  # what a released worker's /proc/PID/environ shows instead


class ReleaseError(Exception):
    pass


def _read_exactly(fd, n, what):
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 16))
        if not chunk:
            raise ReleaseError("dtrun closed the park pipe " + what)
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_release(fd):
    """Blocks until the agent releases this worker; returns the round's environment as a dict."""
    header = b""
    while True:
        c = _read_exactly(fd, 1, "before releasing this worker")
        if c == b"\n":
            break
        header += c
        if len(header) >= MAX_HEADER_BYTES:
            break
    if not header.isdigit() or len(header) >= MAX_HEADER_BYTES or int(header) > MAX_RELEASE_BYTES:
        raise ReleaseError("a release message must start with its size (at most %d bytes)" % MAX_RELEASE_BYTES)
    payload = _read_exactly(fd, int(header), "in the middle of a release")
    if payload and not payload.endswith(b"\0"):
        raise ReleaseError("a release message must end with a NUL")
    env = {}
    for i, entry in enumerate(payload.split(b"\0")[:-1]):
        name, eq, value = entry.partition(b"=")
        if not name or not eq:
            raise ReleaseError("release entry %d is not NAME=value: %r" % (i, entry[:64]))
        env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def mark_released():
    """Renames DTRUN_PARK_FD to DTRUN_WARM_FD (same length) in the environment block this process
    started with, which is what /proc/PID/environ shows: tools then no longer read it as parked."""
    try:
        libc = ctypes.CDLL(None)
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
    except (OSError, ValueError):
        return
    marker = (PARK_FD + "=").encode()
    i = 0
    while environ[i]:
        if ctypes.string_at(environ[i], len(marker)) == marker:
            ctypes.memmove(environ[i], WARM_FD.encode(), len(WARM_FD))
        i += 1

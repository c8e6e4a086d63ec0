#!/bin/sh
# Starts a grandchild in its own session (out of our process group, like a detached helper),
# reports both PIDs, then waits. Ignores SIGTERM when IGNORE_TERM=1.
[ "${IGNORE_TERM:-0}" = 1 ] && trap '' TERM
setsid sleep 300 &
echo "GRANDCHILD $! WORKER $$ RANK $RANK"
echo "READY $RANK"
while :; do sleep 300; done

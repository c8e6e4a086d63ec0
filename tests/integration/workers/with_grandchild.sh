#!/bin/sh
# Starts a grandchild in its own session (out of our process group, like a detached helper),
# reports both PIDs, then waits. Ignores SIGTERM when IGNORE_TERM=1.
# SIGINT ends it wherever it lands. dash catches SIGINT while it runs a script and acts on it only
# when the foreground command ends: one that arrived just before the loop's `sleep` started kept
# the worker for that sleep, and the SIGINT test waited out the whole 30 s shutdown timeout (about
# one run in four). `wait` for a background sleep returns at once when a trapped signal arrives.
[ "${IGNORE_TERM:-0}" = 1 ] && trap '' TERM
trap 'exit 130' INT
setsid sleep 300 &
echo "GRANDCHILD $! WORKER $$ RANK $RANK"
echo "READY $RANK"
while :; do
  sleep 300 &
  wait $!
done

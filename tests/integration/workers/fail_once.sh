#!/bin/sh
# Rank 1 fails with exit code ${CODE:-3} on every attempt before ${SUCCEED_AT:-1}; others wait
# to be stopped (or exit 0 on the succeeding attempt).
echo "attempt $TORCHELASTIC_RESTART_COUNT rank $RANK pid $$"
if [ "$TORCHELASTIC_RESTART_COUNT" -ge "${SUCCEED_AT:-1}" ]; then exit 0; fi
if [ "$RANK" = 1 ]; then exit "${CODE:-3}"; fi
exec sleep 300

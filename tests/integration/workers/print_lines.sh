#!/bin/sh
# Prints $LINES lines "line <rank> <i>" as fast as it can, on stdout and a few on stderr.
i=0
while [ $i -lt "${LINES:-200}" ]; do echo "line $RANK $i"; i=$((i+1)); done
echo "err $RANK" >&2

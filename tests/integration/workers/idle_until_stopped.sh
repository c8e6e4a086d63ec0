#!/bin/sh
echo "READY $RANK"
exec sleep 300

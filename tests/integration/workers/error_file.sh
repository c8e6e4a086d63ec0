#!/bin/sh
# Writes a torchelastic error file (as @record does) and fails.
cat > "$TORCHELASTIC_ERROR_FILE" <<JSON
{"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 7\nValueError: bad batch", "timestamp": "1700000000"}}}
JSON
exit 1

"""Writes this worker's environment as JSON to $DUMP_DIR/<RANK>.json (for launcher comparisons)."""
import json
import os

with open(os.path.join(os.environ["DUMP_DIR"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)

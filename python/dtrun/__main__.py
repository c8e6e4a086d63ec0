"""`python -m dtrun ...`: dtrun with the workers' Python being this one.

As `python -m torch.distributed.run` runs its workers under the interpreter it was started with,
so does this: a venv's or conda env's Python runs `-m dtrun` and its workers import that env's
torch, activated or not. It replaces itself with the dtrun binary (nothing of Python stays
running), found next to this module (<prefix>/lib/dtrun/python/dtrun -> <prefix>/bin/dtrun) or on
PATH. PYTHON_EXEC, or --python, still wins when given.
"""

import os
import sys

from dtrun._binary import dtrun_binary


def main():
    binary = dtrun_binary()
    if binary is None:
        sys.stderr.write("python -m dtrun: no dtrun binary next to this module or on PATH; install dtrun\n")
        return 127
    os.environ.setdefault("PYTHON_EXEC", sys.executable)
    os.execv(binary, [binary] + sys.argv[1:])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())

"""Where the dtrun program is, for `python -m dtrun` and dtrun.elastic_launch."""

import os
import shutil


def dtrun_binary():
    """The dtrun program next to this module (<prefix>/lib/dtrun/python/dtrun -> <prefix>/bin), else on PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.normpath(os.path.join(here, "..", "..", "..", "..", "bin", "dtrun"))
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("dtrun")

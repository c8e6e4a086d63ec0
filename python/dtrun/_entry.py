"""A worker of dtrun.elastic_launch: `python -m dtrun._entry DIR`.

Loads the call that elastic_launch pickled into DIR/call.pkl, re-imports the caller's main module
(as multiprocessing's spawn does, under the name __mp_main__) so that functions defined there
unpickle, runs it, and leaves its return value in DIR/result_<RANK>.pkl. An exception is written
to TORCHELASTIC_ERROR_FILE in torchelastic's format (message, traceback, timestamp) before this
worker exits 1, so that dtrun names it as the root cause.
"""

import importlib.util
import json
import os
import pickle
import sys
import time
import traceback


def _import_caller(path):
    if not path or not os.path.exists(path):
        return
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = module
    spec.loader.exec_module(module)  # its launch sits under `if __name__ == "__main__":`
    sys.modules["__main__"] = module


def _record(error):
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    record = {"message": {"message": "%s: %s" % (type(error).__name__, error),
                          "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as f:
            json.dump(record, f)
    except OSError:
        pass


def main(work):
    with open(os.path.join(work, "call.pkl"), "rb") as f:
        _import_caller(pickle.load(f))  # before the function, which may live there, unpickles
        fn, args = pickle.load(f)
    try:
        value = fn(*args)
    except BaseException as e:  # noqa: B902 (every failure is the rank's root cause)
        _record(e)
        raise
    rank = int(os.environ["RANK"])
    tmp = os.path.join(work, ".result_%d.pkl" % rank)
    with open(tmp, "wb") as f:
        pickle.dump(value, f)
    os.rename(tmp, os.path.join(work, "result_%d.pkl" % rank))


if __name__ == "__main__":
    main(sys.argv[1])

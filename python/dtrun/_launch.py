"""dtrun's counterpart of torch.distributed.launcher.api: elastic_launch and LaunchConfig.

    from dtrun import LaunchConfig, elastic_launch      # instead of torch.distributed.launcher.api

    def train(lr):
        dist.init_process_group("gloo")
        ...
        return final_loss

    if __name__ == "__main__":
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=4, run_id="job")
        losses = elastic_launch(config, train)(0.1)      # {global rank: return value} of this node

The function runs on every rank of this node, in workers dtrun starts and supervises (restarts,
hang detection, in-memory snapshots, the live status) under the Python that runs this caller; its
return values come back pickled, and a failure raises torch's ChildFailedError (or dtrun's own
where torch is not importable) naming the root cause. As with torch's `spawn` start method, the
caller's main module is imported again in each worker: keep the launch under
`if __name__ == "__main__":`. A string entrypoint is a program run with its arguments (returns
None per rank), as in torch.
"""

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, Optional, Union

from dtrun._binary import dtrun_binary

__all__ = ["LaunchConfig", "elastic_launch", "launch_agent", "ChildFailedError", "dtrun_binary", "patch_torchrun"]


@dataclasses.dataclass
class LaunchConfig:
    """torch.distributed.launcher.api.LaunchConfig's fields, as dtrun reads them.

    rdzv_backend "etcd"/"etcd-v2" (torch's default) mean dtrun's own rendezvous (c10d); a
    single-node config with no endpoint gets a free port. start_method, monitor_interval,
    metrics_cfg and logs_specs are accepted and have no effect: dtrun starts every worker as a new
    process and reacts to events.
    """

    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    logs_specs: Any = None
    run_id: str = ""
    role: str = "default_role"
    rdzv_endpoint: str = ""
    rdzv_backend: str = "etcd"
    rdzv_configs: Dict[str, Any] = dataclasses.field(default_factory=dict)
    rdzv_timeout: int = -1
    max_restarts: int = 3
    monitor_interval: float = 0.1
    start_method: str = "spawn"
    log_line_prefix_template: Optional[str] = None
    metrics_cfg: Dict[str, str] = dataclasses.field(default_factory=dict)
    local_addr: Optional[str] = None

    def flags(self):
        """dtrun's command-line flags for this config."""
        nnodes = str(self.min_nodes) if self.min_nodes == self.max_nodes else "%d:%d" % (self.min_nodes, self.max_nodes)
        out = ["--nnodes", nnodes, "--nproc-per-node", str(self.nproc_per_node), "--max-restarts",
               str(self.max_restarts), "--role", self.role]
        if self.run_id:
            out += ["--rdzv-id", self.run_id]
        if self.rdzv_endpoint:
            backend = "c10d" if self.rdzv_backend in ("etcd", "etcd-v2", "c10d") else self.rdzv_backend
            out += ["--rdzv-backend", backend, "--rdzv-endpoint", self.rdzv_endpoint]
        conf = dict(self.rdzv_configs)
        if "rank" in conf:  # torch passes a static job's node rank this way
            out += ["--node-rank", str(conf.pop("rank"))]
        if self.rdzv_timeout >= 0:
            conf.setdefault("join_timeout", self.rdzv_timeout)
        if conf:
            out += ["--rdzv-conf", ",".join("%s=%s" % kv for kv in sorted(conf.items()))]
        if self.log_line_prefix_template is not None:
            out += ["--log-line-prefix-template", self.log_line_prefix_template]
        if self.local_addr:
            out += ["--local-addr", self.local_addr]
        return out


class _OwnChildFailedError(Exception):
    """A failed launch when torch is not importable: the root cause's record from dtrun."""

    def __init__(self, name, failures):
        self.name = name
        self.failures = failures
        root = failures.get(min(failures)) if failures else {}
        super().__init__("%s failed: %s" % (name, root.get("message", "see dtrun's output")))


def _child_failed(name, exit_code, record_path):
    """torch's ChildFailedError for the root cause dtrun wrote (TORCHELASTIC_ERROR_FILE), if torch imports."""
    try:
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    except ImportError:
        record = {}
        try:
            import json

            with open(record_path) as f:
                record = json.load(f).get("message", {})
        except (OSError, ValueError):
            pass
        return _OwnChildFailedError(name, {0: dict(record, exitcode=exit_code)})
    failure = ProcessFailure(local_rank=0, pid=-1, exitcode=exit_code,
                             error_file=record_path if os.path.exists(record_path) else "")
    return ChildFailedError(name=name, failures={0: failure})


try:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError  # noqa: F401
except ImportError:
    ChildFailedError = _OwnChildFailedError


def _main_module_path():
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.abspath(path) if path else ""


def launch_agent(config: LaunchConfig, entrypoint: Union[Callable, str], args):
    """Runs `entrypoint(*args)` on this node's ranks under dtrun; {global rank: return value}."""
    binary = dtrun_binary()
    if binary is None:
        raise RuntimeError("dtrun.elastic_launch: no dtrun binary next to the dtrun module or on PATH; install dtrun")
    work = tempfile.mkdtemp(prefix="dtrun_launch_")
    try:
        record = os.path.join(work, "root_cause.json")
        env = dict(os.environ, TORCHELASTIC_ERROR_FILE=record)
        if callable(entrypoint):
            name = getattr(entrypoint, "__qualname__", repr(entrypoint))
            with open(os.path.join(work, "call.pkl"), "wb") as f:
                # Two records: the caller's main module first, so that a worker imports it before
                # the function (which may live there) is unpickled.
                pickle.dump(_main_module_path(), f)
                pickle.dump((entrypoint, tuple(args)), f)
            program = ["--python", sys.executable, "-m", "dtrun._entry", work]
        else:
            name = os.path.basename(entrypoint)
            program = ["--no-python", entrypoint] + [str(a) for a in args]
        rc = subprocess.call([binary] + config.flags() + program, env=env)
        if rc != 0:
            raise _child_failed(name, rc, record)
        results = {}
        for entry in os.listdir(work):
            if entry.startswith("result_") and entry.endswith(".pkl"):
                with open(os.path.join(work, entry), "rb") as f:
                    results[int(entry[len("result_"):-len(".pkl")])] = pickle.load(f)
        if not callable(entrypoint):
            return {rank: None for rank in range(config.nproc_per_node)}  # a program returns nothing
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)


class elastic_launch:  # noqa: N801 (torch's name)
    """elastic_launch(config, entrypoint)(*args), as torch.distributed.launcher.api's."""

    def __init__(self, config: LaunchConfig, entrypoint: Union[Callable, str, None]):
        self._config = config
        self._entrypoint = entrypoint

    def __call__(self, *args):
        return launch_agent(self._config, self._entrypoint, list(args))


def patch_torchrun():
    """Routes in-process torchrun calls through dtrun: torch.distributed.run.run(args).

    Wrappers that run torchrun inside their own process (`accelerate launch`, `tune run`, tests
    calling torch.distributed.run.main) end in that function; after this call it hands torch's
    own reading of the flags (config_from_args) to dtrun, which runs the same program with the same
    world. `python -m torch.distributed.run ...` becomes `python -m dtrun ...`, and `torchrun` a
    `torchrun` link to dtrun on PATH (docs/MIGRATING.md).
    """
    import torch.distributed.run as torch_run

    def run(args):
        config, cmd, cmd_args = torch_run.config_from_args(args)
        fields = {f.name for f in dataclasses.fields(LaunchConfig)}
        ours = LaunchConfig(**{k: v for k, v in vars(config).items() if k in fields})
        return launch_agent(ours, cmd, cmd_args)

    torch_run.run = run
    return run

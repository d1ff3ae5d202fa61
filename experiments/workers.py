"""Worker processes of every command that runs in parallel: sweeps (experiments/sweep/backends.py),
capacity and whatif searches (experiments/capacity.py), and anything else that starts a pool.

Workers are spawned, so they import nothing of the parent's: `init_worker` loads the plugins the
operator named in $WADILOCO_PLUGINS (a plugin's policy, router or workload kind must be registered in
the process that runs it), and makes the worker exit when its parent dies (a SIGKILLed command must
not leave orphans running). A sweep's workers also leave Ctrl-C, SIGTERM and SIGHUP to the parent,
which records what they finished before it stops them; a search's are interrupted with it.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import threading
import time


def init_worker(parent_pid: int, plugins: tuple[str, ...], leave_signals: bool = False) -> None:
    """ProcessPoolExecutor initializer: import the plugins up front, exit if the parent dies, and
    (`leave_signals`) ignore the signals the parent handles for its workers."""
    if leave_signals:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
    from wadiloco.experiments.sweep.plugins import load_plugins  # (the sweep package imports this module)

    load_plugins(plugins)


def process_pool(
    workers: int, leave_signals: bool = False, plugins: tuple[str, ...] | None = None
) -> cf.ProcessPoolExecutor:
    """`workers` spawned processes, each initialised by `init_worker` with `plugins` (default: those
    $WADILOCO_PLUGINS names)."""
    from wadiloco.experiments.sweep.plugins import plugin_modules

    return cf.ProcessPoolExecutor(
        max_workers=max(1, int(workers)),
        mp_context=mp.get_context("spawn"),
        initializer=init_worker,
        initargs=(os.getpid(), plugin_modules() if plugins is None else tuple(plugins), leave_signals),
    )

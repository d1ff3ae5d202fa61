"""Where a sweep's runs execute: local worker processes or Dask.

LocalBackend: a concurrent.futures process pool ("spawn" context), its workers leaving Ctrl-C,
SIGTERM and SIGHUP to the parent (which stops them) and exiting when the parent dies. DaskBackend: a
LocalCluster it starts, or an existing scheduler; an address is probed first, with a deadline over
the whole greeting, since any other TCP service would leave the Dask handshake waiting for minutes
(or read its banner as the length of a message to allocate). Both take plain task dicts and return
plain result dicts (worker.execute_task), so results depend only on (scenario, policy, params, seed,
draw) and never on the backend, the worker count or the completion order. The interface the
scheduler uses: `workers`, `submit(task)`, `wait(handles)` (those done, at least one),
`result(handle)` (never raises) and `close(cancel)`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import multiprocessing as mp
import os
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

from wadiloco.experiments.sweep.worker import execute_task, init_local_worker
from wadiloco.models.errors import InputError

WORKER_DIED = "worker process died"
PROBE_ENV = "WADILOCO_DASK_PROBE_S"
PROBE_S = 10.0  # the whole greeting of a Dask scheduler, from connect to its first 8 bytes
MAX_GREETING = 64 * 2**20  # a scheduler's handshake message is a few hundred bytes
_ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")


def check_address(addr: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a Dask scheduler address, or an InputError naming it."""
    m = _ADDRESS.fullmatch(addr.strip())
    scheme = (m["scheme"] or "tcp") if m else ""
    if m is None or scheme not in ("tcp", "tls") or not 0 < int(m["port"]) < 65536:
        raise InputError(
            "<command line>", "--scheduler", f"{addr[:200]!r} is not a Dask scheduler address (tcp://HOST:PORT)"
        )
    return scheme, m["host"].strip("[]"), int(m["port"])


def probe_timeout() -> float:
    raw = os.environ.get(PROBE_ENV, "").strip()
    if not raw:
        return PROBE_S
    if not re.fullmatch(r"[0-9]{1,4}(\.[0-9]*)?", raw) or not 0 < float(raw) <= 3600:
        raise InputError(f"${PROBE_ENV}", "", f"must be a number of seconds from 0 to 3600 (got {raw[:40]!r})")
    return float(raw)


def probe_scheduler(addr: str, timeout: float | None = None) -> None:
    """Check within `timeout` seconds ($WADILOCO_DASK_PROBE_S, default 10), in all, that `addr` greets
    like a Dask scheduler: on connect it sends its handshake at once, framed by an 8-byte
    little-endian length."""
    timeout = probe_timeout() if timeout is None else timeout
    scheme, host, port = check_address(addr)
    if scheme != "tcp":
        return  # TLS: the handshake is encrypted; Client's own timeout applies
    deadline = time.monotonic() + timeout

    def fail(why: str):
        raise InputError("<command line>", "--scheduler", f"{addr}: {why}; is it a Dask scheduler?")

    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        fail(f"cannot connect ({e.strerror or e})")
    head = b""
    try:
        while len(head) < 8:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(8 - len(head))
            if not chunk:
                break
            head += chunk
    except TimeoutError:
        fail(f"accepted the connection but sent no Dask greeting within {timeout:g} s")
    except OSError as e:
        fail(f"connection failed during the greeting ({e.strerror or e})")
    finally:
        sock.close()
    if len(head) < 8:
        fail("closed the connection without a Dask greeting")
    if not 0 < int.from_bytes(head, "little") <= MAX_GREETING:
        fail("answered with something other than a Dask message")


@contextlib.contextmanager
def process_pool(workers: int, plugins: tuple[str, ...] = ()) -> Iterator[cf.ProcessPoolExecutor]:
    """A pool of spawned worker processes that never outlives its command: each worker leaves
    Ctrl-C, SIGTERM and SIGHUP to the parent, loads the plugins, and exits if the parent dies
    (worker.init_local_worker; a worker waiting for work would otherwise wait forever, since the
    pool's queues stay open in its siblings); on the way out the pool is shut down after success,
    and its workers killed after an error, a stop or a time-out (never waited for)."""
    ex = cf.ProcessPoolExecutor(
        max_workers=max(1, int(workers)),
        mp_context=mp.get_context("spawn"),
        initializer=init_local_worker,
        initargs=(os.getpid(), tuple(plugins)),
    )
    try:
        yield ex
    except BaseException:
        kill_pool(ex)
        raise
    ex.shutdown(wait=True)


def kill_pool(ex: cf.ProcessPoolExecutor) -> None:
    """Stop a pool now: queued tasks cancelled, its workers killed (they ignore SIGTERM) and reaped."""
    procs = list(getattr(ex, "_processes", {}).values())  # the workers this pool started
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5)


class LocalBackend:
    name = "local"

    def __init__(self, workers: int, plugins: tuple[str, ...] = ()):
        self.workers = max(1, int(workers))
        self.plugins = plugins
        self.ex: cf.ProcessPoolExecutor | None = None
        self._start()

    def _start(self) -> None:
        self.ex = cf.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=init_local_worker,
            initargs=(os.getpid(), self.plugins),
        )

    def submit(self, task: dict[str, Any]):
        try:
            return self.ex.submit(execute_task, task)
        except cf.process.BrokenProcessPool:
            self._kill()
            self._start()
            return self.ex.submit(execute_task, task)

    def wait(self, handles) -> list:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, h) -> dict[str, Any]:
        try:
            return h.result()
        except cf.process.BrokenProcessPool as e:
            return {"status": "error", "error": f"{WORKER_DIED} ({e})", "died": True}
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable result
            return {"status": "error", "error": f"{type(e).__name__}: {e}"}

    def _kill(self) -> None:
        if self.ex is not None:
            kill_pool(self.ex)

    def close(self, cancel: bool = False) -> None:
        if self.ex is None:
            return
        if cancel:
            self._kill()
        else:
            self.ex.shutdown(wait=True)
        self.ex = None


class DaskBackend:
    name = "dask"

    def __init__(self, workers: int, scheduler: str | None = None, plugins: tuple[str, ...] = ()):
        from wadiloco.experiments.extras import require

        require("distributed", "the Dask backend", "--backend")
        from distributed import Client, LocalCluster

        self.cluster = None
        if scheduler:
            probe_scheduler(scheduler)
            try:
                self.client = Client(scheduler, timeout="15s")
            except Exception as e:  # noqa: BLE001 - OSError, TimeoutError, a garbled handshake, ...
                why = (str(e).splitlines() or [""])[0][:300]
                raise InputError(
                    "<command line>", "--scheduler", f"cannot connect to the Dask scheduler at {scheduler}: {why}"
                ) from None
            self.workers = max(1, sum(self.client.nthreads().values()))
        else:
            self.cluster = LocalCluster(
                n_workers=max(1, int(workers)),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
            self.workers = max(1, int(workers))

    def submit(self, task: dict[str, Any]):
        return self.client.submit(execute_task, task, pure=False)

    def wait(self, handles) -> list:
        from distributed import wait

        return list(wait(handles, return_when="FIRST_COMPLETED").done)

    def result(self, h) -> dict[str, Any]:
        try:
            return h.result()
        except Exception as e:  # noqa: BLE001 - KilledWorker, CommClosedError, ...
            return {"status": "error", "error": f"{type(e).__name__}: {e}"}

    def close(self, cancel: bool = False) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def make_backend(kind: str, workers: int, scheduler: str | None, plugins: tuple[str, ...]):
    if kind == "local":
        return LocalBackend(workers, plugins)
    return DaskBackend(workers, scheduler, plugins)

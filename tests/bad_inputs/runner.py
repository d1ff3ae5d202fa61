"""Runs the bad-input corpus (the other files in this folder) and prints one JSON result per case.

    python tests/bad_inputs/runner.py CLASS.yaml [--real] [--only ID]

Every case goes through the real command line, `wadiloco.experiments.cli.main`, in this process
(many cases per process: one start-up per class) or, with --real, as `python -m
wadiloco.experiments.cli` in a child process of its own. The caller (tests/experiments/test_bad_input_corpus.py)
runs this script in a child with a memory and CPU limit; each case also has a wall-clock limit. A
case passes when the command exits with the expected code (2 unless it says otherwise) and one
message (no blank line, no traceback) that contains every needle and none of the `absent` texts,
and when nothing in the case's folder changed: no file created, removed or rewritten, every
symlink still the same link, every FIFO still a FIFO. The case format is in README.md here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CASE_LIMIT_S = 30
BEFORE_LIMIT_S = 180
CHILD_MEMORY = 4 * 2**30


class CaseTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def limits() -> None:
    """preexec_fn of every child: a memory and a CPU-time limit."""
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (600, 600))


# ---- a case's folder ------------------------------------------------------------------------


def _value(spec, ctx: dict) -> str:
    if isinstance(spec, dict) and "python" in spec:
        return str(eval(spec["python"], {}, dict(ctx)))  # noqa: S307 - this corpus's own expressions
    text = str(spec)
    for k in ("d", "root", "port"):
        text = text.replace("{" + k + "}", str(ctx[k]))
    return text


def make_file(path: Path, spec, ctx: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, dict) and "fifo" in spec:
        os.mkfifo(path)
    elif isinstance(spec, dict) and "symlink" in spec:
        os.symlink(_value(spec["symlink"], ctx), path)
    elif isinstance(spec, dict) and "dir" in spec:
        path.mkdir()
    elif isinstance(spec, dict) and "sqlite" in spec:  # a new database, or SQL run on an existing one
        import sqlite3

        con = sqlite3.connect(path)
        con.executescript(_value(spec["sqlite"], ctx))
        con.close()
    elif isinstance(spec, dict) and "socket" in spec:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        ctx.setdefault("_keep", []).append(s)
    else:
        path.write_text(_value(spec, ctx))


def snapshot(d: Path, watch: list[str] = ()) -> dict[str, tuple]:
    """Every entry under d (and each watched path elsewhere): its type, and a symlink's target or a
    file's bytes (size and mtime past 1 MiB). SQLite's shared-memory index (-shm) is a cache any
    reader may touch, so it is left out."""
    out = {}
    for p in [*sorted(d.rglob("*")), *map(Path, watch)]:
        if p.name.endswith("-shm"):
            continue
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        rel = str(p.relative_to(d)) if p.is_relative_to(d) else str(p)
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[rel] = ("file", p.read_bytes()) if st.st_size < 2**20 else ("file", st.st_size, st.st_mtime_ns)
        else:
            out[rel] = (stat.S_IFMT(st.st_mode), st.st_rdev)
    return out


@contextlib.contextmanager
def tcp_server(kind: str):
    """A TCP service on 127.0.0.1 that is not a Dask scheduler: 'banner' greets like SSH (8 bytes
    that read as an absurd Dask frame length), 'silent' accepts and says nothing, as HTTP does."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    conns = []

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(c)
            if kind == "banner":
                c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(2)
        for c in conns:
            c.close()
        srv.close()


# ---- running a command ----------------------------------------------------------------------


@contextlib.contextmanager
def _stdout(mode: str | None):
    if mode == "/dev/full":
        f = open("/dev/full", "w")  # noqa: SIM115
    elif mode == "closed":
        r, w = os.pipe()
        os.close(r)
        f = os.fdopen(w, "w")
    else:
        f = io.StringIO()
    old = sys.stdout
    sys.stdout = f
    try:
        yield
    finally:
        sys.stdout = old
        with contextlib.suppress(OSError, ValueError):
            f.close()


def call_main(argv: list[str], stdout: str | None, limit: float, module: str | None = None) -> tuple[int, str]:
    import importlib

    main = importlib.import_module(module or "wadiloco.experiments.cli").main

    err, old_err = io.StringIO(), sys.stderr
    sys.stderr = err
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with _stdout(stdout):
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse
                rc = e.code if isinstance(e.code, int) else 2
    except CaseTimeout:
        rc = "timeout"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.stderr = old_err
    return rc, err.getvalue()


def call_real(
    argv: list[str], stdout: str | None, limit: float, env: dict, module: str | None = None, cwd: str | None = None
) -> tuple[int, str]:
    cmd = [sys.executable, "-m", module or "wadiloco.experiments.cli", *argv]
    out = subprocess.DEVNULL
    r = None
    if stdout == "/dev/full":
        out = open("/dev/full", "w")  # noqa: SIM115
    elif stdout == "closed":
        r, w = os.pipe()
        out = w
    try:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, preexec_fn=limits, cwd=cwd or ROOT)
        if r is not None:
            os.close(r)
            os.close(w)
        try:
            _, err = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return "timeout", ""
    finally:
        if stdout == "/dev/full":
            out.close()
    return p.returncode, err.decode(errors="replace")


def _restore_env(saved: dict) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# ---- one case -------------------------------------------------------------------------------


def one_paragraph(err: str) -> str | None:
    text = err.strip()
    if not text:
        return "no message"
    if "Traceback" in err:
        return "a traceback"
    if "\n\n" in text:
        return "more than one paragraph"
    lines = text.splitlines()
    if len(lines) > 1:
        return f"{len(lines)} lines"
    return None


def run_case(case: dict, base: Path, real: bool) -> dict:
    d = Path(tempfile.mkdtemp(prefix=case["id"][:40] + ".", dir=base))
    res = {"id": case["id"], "problems": []}
    with contextlib.ExitStack() as stack:
        port = stack.enter_context(tcp_server(case["server"])) if case.get("server") else 0
        ctx = {"d": str(d), "root": str(ROOT), "port": port}
        for name, spec in (case.get("files") or {}).items():
            make_file(d / _value(name, ctx), spec, ctx)
        env_add = {k: _value(v, ctx) for k, v in (case.get("env") or {}).items()}
        saved = {k: os.environ.get(k) for k in env_add}
        os.environ.update(env_add)
        stack.callback(_restore_env, saved)
        for before in case.get("before") or []:
            rc, err = call_main([_value(a, ctx) for a in before], None, BEFORE_LIMIT_S)
            if rc != 0:
                res["problems"].append(f"set-up command {before} exited {rc}: {err[-500:]}")
                return res
        for name, spec in (case.get("edit") or {}).items():
            if isinstance(spec, dict) and "sqlite" in spec:
                make_file(d / _value(name, ctx), spec, ctx)  # SQL run on the store a `before` command made
            else:
                (d / _value(name, ctx)).write_text(_value(spec, ctx))
        watch = [_value(w, ctx) for w in case.get("watch") or []]
        before_state = snapshot(d, watch)
        argv = [_value(a, ctx) for a in case["argv"]]
        module, cwd = case.get("module"), _value(case["cwd"], ctx) if case.get("cwd") else None
        t0 = time.monotonic()
        if real:
            rc, err = call_real(argv, case.get("stdout"), CASE_LIMIT_S, dict(os.environ), module, cwd)
        else:
            here = os.getcwd()
            os.chdir(cwd or here)
            try:
                rc, err = call_main(argv, case.get("stdout"), CASE_LIMIT_S, module)
            finally:
                os.chdir(here)
        res.update(rc=rc, err=err[-2000:], seconds=round(time.monotonic() - t0, 2))
        _judge(case, ctx, rc, err, before_state, snapshot(d, watch), res["problems"])
    return res


def _judge(case, ctx, rc, err, before_state, after_state, problems) -> None:
    want = case.get("code", 2)
    if rc != want:
        problems.append(f"exit code {rc}, expected {want}")
    if case.get("quiet"):
        if err.strip():
            problems.append(f"expected no message, got {err.strip()[:300]!r}")
    else:
        why = one_paragraph(err)
        if why:
            problems.append(f"message: {why}")
    for n in case.get("needles") or []:
        n = _value(n, ctx)
        if n not in err:
            problems.append(f"message lacks {n!r}")
    for n in case.get("absent") or []:
        n = _value(n, ctx)
        if n in err:
            problems.append(f"message contains {n!r}")
    if case.get("max_chars") is not None and len(err) > case["max_chars"]:
        problems.append(f"message of {len(err):,} characters, more than {case['max_chars']:,}")
    if before_state != after_state:
        changed = sorted(set(before_state) ^ set(after_state)) + sorted(
            k for k in set(before_state) & set(after_state) if before_state[k] != after_state[k]
        )
        problems.append(f"the case's folder changed: {changed[:5]}")


def main() -> int:
    args = sys.argv[1:]
    real = "--real" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    corpus = Path(args[0])
    cases = yaml.safe_load(corpus.read_text())
    if only:
        cases = [c for c in cases if c["id"] == only]
    elif real:
        cases = [c for c in cases if c.get("real")] or cases[:1]
    os.environ.setdefault("WADILOCO_CHECK_INVARIANTS", "0")
    with tempfile.TemporaryDirectory(prefix=f"bad_inputs_{corpus.stem}.") as base:
        for case in cases:
            res = run_case(case, Path(base), real)
            print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

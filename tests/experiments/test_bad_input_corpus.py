"""The bad-input corpus (tests/bad_inputs/*.yaml, one file per class of defect; format in its
README.md): every case through the real command line in a child process with a memory and CPU
limit, and a wall-clock limit per case. One child per class runs all its cases (start-up is paid
once), and one case per class also runs as `python -m wadiloco.experiments.cli` in a process of
its own, so the batching cannot hide what only a fresh process shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "bad_inputs"
RUNNER = HERE / "runner.py"
sys.path.insert(0, str(HERE))
from runner import limits  # noqa: E402

CLASSES = sorted(HERE.glob("*.yaml"))


def _run(corpus: Path, *extra: str) -> list[dict]:
    env = {**__import__("os").environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(
        [sys.executable, str(RUNNER), str(corpus), *extra],
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=limits,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def _report(results: list[dict]) -> str:
    bad = [r for r in results if r["problems"]]
    return "\n".join(f"{r['id']}: {'; '.join(r['problems'])}\n    stderr: {r.get('err', '')[:600]!r}" for r in bad)


@pytest.mark.parametrize("corpus", CLASSES, ids=[c.stem for c in CLASSES])
def test_corpus_class(corpus):
    results = _run(corpus)
    expected = len(__import__("yaml").safe_load(corpus.read_text()))
    assert len(results) == expected, f"{len(results)} of {expected} cases reported"
    assert not any(r["problems"] for r in results), _report(results)


@pytest.mark.parametrize("corpus", CLASSES, ids=[c.stem for c in CLASSES])
def test_corpus_class_real_subprocess(corpus):
    results = _run(corpus, "--real")
    assert results and not any(r["problems"] for r in results), _report(results)

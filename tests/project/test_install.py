"""A non-editable install has every file the documented commands read.

Fast: the files setup.cfg installs (each package's modules and its package_data) cover every
repository file a command in README.md or docs/ names (a scenario, a sweep file) with the scenarios
each named sweep file names, and every file a module finds beside its own code (a path constant
such as the testbed sensitivity study's sweep file). Slow: `pip install` (not editable) into a
folder, then the README's commands and the studies' package-relative reads run from it.
"""

from __future__ import annotations

import configparser
import importlib
import os
import pkgutil
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTPUTS = ("--doc", "--out", "--output", "--figure")  # flags whose value a command writes, not reads
COMMAND = re.compile(r"^\s*(?:\$\s*)?((?:wadiloco|python -m wadiloco\.\S+)\b.*)$")


def installed_files() -> set[Path]:
    """The repository files a plain `pip install .` puts in the wheel, from setup.cfg: each listed
    package's modules and the files its package_data globs match."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    dirs = dict(
        (k.strip(), v.strip())
        for k, v in (line.split("=") for line in cfg["options"]["package_dir"].splitlines() if "=" in line)
    )
    data = {k: [g.strip() for g in v.split(",") if g.strip()] for k, v in cfg["options.package_data"].items()}
    out: set[Path] = set()
    for pkg in (p.strip() for p in cfg["options"]["packages"].split() if p.strip()):
        top = max((k for k in dirs if pkg == k or pkg.startswith(k + ".")), key=len)
        folder = ROOT / dirs[top] / Path(*pkg[len(top) + 1 :].split(".")) if pkg != top else ROOT / dirs[top]
        out |= set(folder.glob("*.py"))
        for pattern in data.get(pkg, []):
            out |= set(folder.glob(pattern))
    return {p.resolve() for p in out}


def documented_commands() -> list[list[str]]:
    """Every `wadiloco ...` and `python -m wadiloco...` line in a code block or inline code of the
    README and docs/, as argument lists."""
    cmds = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        chunks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
        for chunk in chunks:
            for line in chunk.splitlines():
                m = COMMAND.match(line.split("  #")[0])
                if m:
                    try:
                        cmds.append(shlex.split(m.group(1).replace("&&", " ")))
                    except ValueError:
                        continue
    return cmds


def _files_named(cmd: list[str]) -> set[Path]:
    """Repository files a command names, and for a sweep file the scenarios its regimes name."""
    from wadiloco.experiments.sweep.spec import read_spec

    out = set()
    for prev, tok in zip(["", *cmd], cmd):
        p = (ROOT / tok).resolve()
        if prev in OUTPUTS:  # a page or folder the command writes
            continue
        if not tok.startswith("-") and ROOT in p.parents and p.is_file():
            out.add(p)
            if p.parent == ROOT / "experiments" and p.suffix == ".yaml":
                spec = read_spec(p)
                out |= {(p.parent / e.path).resolve() for i, r in enumerate(spec.regimes) for e in r.expand(i)}
    return out


def test_documented_commands_read_only_installed_files():
    cmds = documented_commands()
    assert any(c[:2] == ["wadiloco", "run"] for c in cmds) and any("testbed_table" in " ".join(c) for c in cmds)
    named = set().union(*(_files_named(c) for c in cmds))
    assert ROOT / "experiments" / "testbed.yaml" in named and ROOT / "scenarios" / "bursty.yaml" in named
    missing = sorted(str(p.relative_to(ROOT)) for p in named - installed_files())
    assert not missing, f"documented commands read files a wheel lacks (setup.cfg package_data): {missing}"


def _module_paths() -> set[Path]:
    """Files under the repository that module-level constants of experiments/ and benchmarks/ name
    (a path beside the code, or a list of them)."""
    out = set()
    for pkg in ("wadiloco.experiments", "wadiloco.benchmarks"):
        base = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(base.__path__, pkg + "."):
            mod = importlib.import_module(info.name)
            for v in vars(mod).values():
                for p in v if isinstance(v, list | tuple) else [v]:
                    if isinstance(p, Path) and ROOT in p.resolve().parents and p.is_file():
                        out.add(p.resolve())
    return out


def test_files_modules_read_beside_their_code_are_installed():
    paths = _module_paths()
    assert (ROOT / "experiments" / "testbed.yaml").resolve() in paths  # testbed_sensitivity.SWEEP
    missing = sorted(str(p.relative_to(ROOT)) for p in paths - installed_files())
    assert not missing, f"modules read files a wheel lacks (setup.cfg package_data): {missing}"


# ---- a real non-editable install ----------------------------------------------------------------


def _can_build_offline() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("setuptools", "wheel", "Cython"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install --no-deps --target DIR .`: the package as a wheel installs it (the compiled core
    included), importable from DIR with this environment's dependencies."""
    target = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(ROOT)]
    if _can_build_offline():
        cmd.insert(-1, "--no-build-isolation")
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    env = {**os.environ, "PYTHONPATH": str(target), "WADILOCO_SHARED": os.environ.get("WADILOCO_SHARED", "")}
    env.pop("WADILOCO_PLUGINS", None)
    return target, env


def _run(args: list[str], env: dict, cwd: Path, timeout: float = 600) -> str:
    r = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: {r.stderr[-2000:]}"
    return r.stdout


@pytest.mark.slow
def test_readme_commands_from_a_non_editable_install(installed, tmp_path):
    target, env = installed
    py = [sys.executable, "-c"]
    where = _run([*py, "import wadiloco.experiments as e; print(e.__file__)"], env, tmp_path)
    assert where.startswith(str(target)), where  # the installed copy, not the checkout
    cli = [*py, "import sys; from wadiloco.experiments.cli import main; sys.exit(main(sys.argv[1:]))"]
    # the README's commands, from the checkout (its scenarios and sweep files are where it says)
    out = _run([*cli, "run", "scenarios/bursty.yaml", "--set", "horizon_s=60", "--check"], env, ROOT)
    assert "SLO violation rate" in out
    _run([*cli, "show", "scenarios/bursty.yaml"], env, ROOT)
    _run([*cli, "sweep", "experiments/smoke.yaml", "--out", str(tmp_path / "smoke"), "--workers", "2"], env, ROOT)
    assert (tmp_path / "smoke" / "runs.csv").is_file()
    # what studies read beside their code: the testbed sweep and the scenarios it names (installed)
    check = (
        "from wadiloco.experiments.studies import testbed_sensitivity as t; "
        "from wadiloco.experiments.sweep import load_sweep; p = load_sweep(t.SWEEP); "
        f"assert str(t.SWEEP).startswith({str(target)!r}), t.SWEEP; print(len(p.regimes))"
    )
    assert int(_run([*py, check], env, tmp_path)) == 12
    _run([*cli, "validate", "diloco-measured", "--json"], env, tmp_path)
    _run([*cli, "policies"], env, tmp_path)

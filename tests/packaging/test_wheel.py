"""The built wheel holds exactly the shipped packages: never the simulator, nor the tests.

The images install the project with ``pip install .``; this builds the same wheel from a clean
copy of the source tree (setuptools reuses a stale ``build/`` directory, which could hide a
package the configuration no longer names) and lists what is inside.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"shared", "watcher", "apiserver", "compiler", "stagectl", "inference_auth"}
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".pgdata", ".run", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
)


def build_wheel(tmp_path: Path) -> Path:
    source, out = tmp_path / "source", tmp_path / "wheel"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    assert (source / "sim").is_dir()  # the simulator is there to be left out
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), "."],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


def test_the_wheel_holds_exactly_the_shipped_packages(tmp_path: Path) -> None:
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        names = wheel.namelist()
    top_level = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert top_level == SHIPPED
    migrations = [name for name in names if name.startswith("shared/db/migrations/")]
    on_disk = sorted(p.name for p in (ROOT / "shared" / "db" / "migrations").glob("*.sql"))
    assert sorted(name.rsplit("/", 1)[1] for name in migrations if name.endswith(".sql")) == on_disk
    assert on_disk  # the schema ships with the code that migrates it

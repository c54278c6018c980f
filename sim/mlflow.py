"""A real MLflow tracking server with the basic-auth app, as the tests and the demo run it.

Dev and test only. MLflow lives in a virtualenv of its own (``.run/mlflow-venv``, made by
``scripts/ensure-mlflow.sh`` at the pinned version), started the way docs/operations.md tells an
operator to: ``mlflow server --app-name basic-auth`` with ``default_permission =
NO_PERMISSIONS`` (with MLflow's shipped ``READ`` every account reads every experiment), the
administrator workflow-manager acts as, one worker and no job runner
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``: two processes, about 440 MB, ready in about ten
seconds instead of fifteen processes and 1.5 GB), SQLite stores in the server's own directory.
``MlflowServer`` is synchronous (a session fixture and the demo's thread both use it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from sim.ports import free_port

ROOT: Final = Path(__file__).resolve().parent.parent
VERSION: Final = "3.17.2"  # scripts/ensure-mlflow.sh installs this one
VENV: Final = ROOT / ".run" / "mlflow-venv"
ENSURE: Final = ROOT / "scripts" / "ensure-mlflow.sh"
ADMIN_USERNAME: Final = "wm-admin"


def auth_config(*, database_uri: str, admin_username: str, admin_password: str) -> str:
    """The basic-auth app's ini (``MLFLOW_AUTH_CONFIG_PATH``). Purely computational."""
    return "\n".join(
        [
            "[mlflow]",
            # Nothing is readable unless granted: workflow-manager grants each tenant's account
            # EDIT on its own pipelines' experiments and nothing else.
            "default_permission = NO_PERMISSIONS",
            f"database_uri = {database_uri}",
            f"admin_username = {admin_username}",
            f"admin_password = {admin_password}",
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
            "",
        ]
    )


def ensure_installed() -> Path:
    """The pinned ``mlflow`` executable, installing it first when missing (about a minute)."""
    binary = VENV / "bin" / "mlflow"
    if not (VENV / f".installed-{VERSION}").exists() or not binary.exists():
        subprocess.run([str(ENSURE)], check=True)
    return binary


@dataclass
class MlflowServer:
    """One ``mlflow server`` process group with its own directory, started and stopped by its
    owner."""

    state_dir: Path
    admin_username: str = ADMIN_USERNAME
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "mlflow.log"

    def command(self, binary: Path) -> list[str]:
        return [
            str(binary),
            "server",
            "--app-name",
            "basic-auth",
            "--workers",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend-store-uri",
            f"sqlite:///{self.state_dir / 'tracking.db'}",
            "--artifacts-destination",
            str(self.state_dir / "artifacts"),
        ]

    def start(self, *, timeout: float = 120.0) -> None:
        """Start the server and wait until ``/health`` answers; RuntimeError with the log's
        tail when it exits or does not answer in ``timeout`` seconds."""
        binary = ensure_installed()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ini = self.state_dir / "basic_auth.ini"
        ini.touch(mode=0o600)
        ini.write_text(
            auth_config(
                database_uri=f"sqlite:///{self.state_dir / 'auth.db'}",
                admin_username=self.admin_username,
                admin_password=self.admin_password,
            )
        )
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        env.update(
            MLFLOW_AUTH_CONFIG_PATH=str(ini),
            MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(16),
            MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
            MLFLOW_DISABLE_TELEMETRY="true",
            DO_NOT_TRACK="true",
        )
        log = self.log_path.open("ab")
        try:
            # A session of its own: stop() ends the CLI and the uvicorn worker it spawned.
            self._process = subprocess.Popen(
                self.command(binary),
                env=env,
                cwd=self.state_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self._process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self._log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"mlflow server did not answer: {self._log_tail()}")
            time.sleep(0.2)

    def healthy(self) -> bool:
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer,
        ):
            return bool(answer.status == 200)
        return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def _log_tail(self) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"

    def __enter__(self) -> MlflowServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

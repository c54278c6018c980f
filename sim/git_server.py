"""A real Git smart-HTTP server with basic authentication, for Git sync's tests, benchmark and
demo: git's own ``git http-backend`` run as a CGI program behind a small aiohttp server that
checks the credentials, over HTTPS with a certificate of the simulator's test CA.

- every repository under ``root`` (bare, ``<name>.git``) is served at ``/<name>.git``;
- ``users`` may read every repository; any other request, or one without credentials, is a 401
  with ``WWW-Authenticate: Basic`` (as GitHub and GitLab answer); names in ``public`` are served
  to anyone; ``protocol_v2=False`` answers as a server that speaks only protocol v0;
  ``filters=False`` as one that ignores a partial clone's filter (and sends every blob);
- ``requests`` is the log of what was asked: method, path, the authenticated user and, for a
  POST to ``git-upload-pack``, the protocol v2 command (``ls-refs`` or ``fetch``; a v0 POST is a
  fetch), so a test can prove that a check fetched nothing;
- ``create`` and ``commit`` write repositories with git's plumbing (no work tree), quickly
  enough for a benchmark's thousands.

``python -m sim.git_server --root DIR --port N --user NAME:PASSWORD --ca-file PEM`` runs it in a
process of its own (the benchmark and the demo), writing its CA to ``PEM`` for
``GIT_CA_BUNDLE``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import gzip
import hmac
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trustme
from aiohttp import web

from sim.kube.certificates import test_ca
from sim.ports import free_port

HTTP_BACKEND: Final = "/usr/lib/git-core/git-http-backend"
# A name the certificate also holds and no DNS knows: a client reaches the server by it only
# through an address it was given (pinned), as Git sync connects to the address it checked.
NAME: Final = "git.wm-sim.test"
_IDENTITY: Final = {
    "GIT_AUTHOR_NAME": "Sim Author",
    "GIT_AUTHOR_EMAIL": "author@sim.invalid",
    "GIT_COMMITTER_NAME": "Sim Author",
    "GIT_COMMITTER_EMAIL": "author@sim.invalid",
}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    user: str | None
    status: int
    command: str | None = None  # advertise, ls-refs, fetch
    shallow: bool = False  # a fetch asking for a branch's head alone (depth 1)

    @property
    def repository(self) -> str:
        return self.path.split(".git/", 1)[0].lstrip("/") + ".git"


@dataclass
class GitServer:
    root: Path
    users: dict[str, str]
    public: set[str] = field(default_factory=set)
    protocol_v2: bool = True  # False: answer as a server that only speaks protocol v0
    filters: bool = True  # False: a server that ignores a partial clone's filter
    requests: list[Request] = field(default_factory=list)
    # Fetches: held until ``hold`` is set (when one is given), answered 500 by a broken
    # upload-pack when ``refuse_fetches``; how many are being served now, and the most at once.
    hold: asyncio.Event | None = None
    refuse_fetches: bool = False
    fetching: int = 0
    most_fetching: int = 0
    port: int = 0
    ca_file: Path | None = None
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def repository_url(self, name: str) -> str:
        return f"{self.url}/{name}.git"

    def fetches(self, name: str | None = None) -> list[Request]:
        """Requests that fetched a branch's head (of repository ``name``): one per document
        read (``objects`` also counts the blobs a partial clone asked for afterwards)."""
        return [r for r in self.objects(name) if r.shallow]

    def objects(self, name: str | None = None) -> list[Request]:
        """Requests that fetched objects (of repository ``name``)."""
        return [
            r
            for r in self.requests
            if r.command == "fetch" and (name is None or r.repository == f"{name}.git")
        ]

    # --- repositories ----------------------------------------------------------------------
    def create(self, name: str, files: Mapping[str, str | bytes], *, branch: str = "main") -> str:
        """A bare repository ``name`` with one commit of ``files`` on ``branch``: its sha."""
        path = self.root / f"{name}.git"
        _git("init", "--bare", "--quiet", f"--initial-branch={branch}", str(path))
        return self.commit(name, files, message="first", branch=branch)

    def commit(
        self,
        name: str,
        files: Mapping[str, str | bytes | None],
        *,
        message: str = "change",
        branch: str = "main",
    ) -> str:
        """A commit on ``branch`` changing ``files`` (None deletes one): its sha."""
        repo = str(self.root / f"{name}.git")
        ref = f"refs/heads/{branch}"
        parent = _git("-C", repo, "rev-parse", "--verify", "--quiet", ref, check=False).strip()
        with tempfile.TemporaryDirectory() as scratch:
            env = {"GIT_INDEX_FILE": os.path.join(scratch, "index")}
            if parent:
                _git("-C", repo, "read-tree", parent, env=env)
            entries = []
            for path, content in files.items():
                if content is None:  # mode 0 removes the entry
                    entries.append(f"0 {'0' * 40}\t{path}\n")
                    continue
                data = content.encode() if isinstance(content, str) else content
                blob = _git("-C", repo, "hash-object", "-w", "--stdin", stdin=data).strip()
                entries.append(f"100644 {blob}\t{path}\n")
            _git(
                "-C", repo, "update-index", "--index-info", env=env, stdin="".join(entries).encode()
            )
            tree = _git("-C", repo, "write-tree", env=env).strip()
        parents = ["-p", parent] if parent else []
        sha = _git("-C", repo, "commit-tree", tree, *parents, "-m", message, env=_IDENTITY).strip()
        _git("-C", repo, "update-ref", ref, sha)
        return sha

    def copy(self, source: str, name: str) -> None:
        """Another repository with the same history (cheap: a benchmark's thousands)."""
        shutil.copytree(self.root / f"{source}.git", self.root / f"{name}.git")

    # --- serving ---------------------------------------------------------------------------
    async def start(self, *, port: int = 0, ca: trustme.CA | None = None) -> GitServer:
        ca = ca or test_ca()
        self.ca_file = self.root / "ca.pem"
        self.ca_file.write_bytes(ca.cert_pem.bytes())
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1", "localhost", NAME).configure_cert(context)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self.port = port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=context).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _user(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            name, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        expected = self.users.get(name)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            return None
        return name

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":  # git compresses large requests
            body = gzip.decompress(body)
        user = self._user(request)
        repository = request.path.split(".git/", 1)[0].lstrip("/")
        command = _command(request, body, v2=self.protocol_v2)
        if user is None and repository not in self.public:
            self.requests.append(Request(request.method, request.path, None, 401, command))
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        if command != "fetch":
            return await self._serve(request, body, user, command)
        self.fetching += 1
        self.most_fetching = max(self.most_fetching, self.fetching)
        try:
            if self.hold is not None:
                await self.hold.wait()
            if self.refuse_fetches:
                self.requests.append(Request(request.method, request.path, user, 500, command))
                return web.Response(status=500, text="upload-pack: internal error at 10.1.2.3")
            return await self._serve(request, body, user, command)
        finally:
            self.fetching -= 1

    async def _serve(
        self, request: web.Request, body: bytes, user: str | None, command: str | None
    ) -> web.StreamResponse:
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user or "",
            "REMOTE_ADDR": request.remote or "",
            "GIT_PROTOCOL": request.headers.get("Git-Protocol", "") if self.protocol_v2 else "",
            # As GitHub and GitLab serve: partial clones (a blob filter; protocol v2 then
            # serves the one blob a partial clone asks for afterwards).
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "uploadpack.allowFilter",
            "GIT_CONFIG_VALUE_0": "true" if self.filters else "false",
        }
        process = await asyncio.create_subprocess_exec(
            HTTP_BACKEND,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        output, _ = await process.communicate(body)
        head, _, payload = output.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode(errors="replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers[key] = value.strip()
        shallow = command == "fetch" and b"deepen 1" in body
        self.requests.append(Request(request.method, request.path, user, status, command, shallow))
        return web.Response(status=status, body=payload, headers=headers)


def _command(request: web.Request, body: bytes, *, v2: bool) -> str | None:
    if request.method == "GET" and request.path.endswith("/info/refs"):
        return "advertise"
    if request.method == "POST" and request.path.endswith("/git-upload-pack"):
        if "version=2" not in request.headers.get("Git-Protocol", "") or not v2:
            return "fetch"
        try:
            first = body[4 : int(body[:4], 16)].rstrip(b"\n").decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return first.removeprefix("command=")
    return None


def _git(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    check: bool = True,
) -> str:
    completed = subprocess.run(
        ["git", *args],
        input=stdin,
        capture_output=True,
        check=False,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": tempfile.gettempdir(),
            "GIT_CONFIG_NOSYSTEM": "1",
            **(env or {}),
        },
    )
    if check and completed.returncode != 0:
        raise RuntimeError(f"git {args[0]}: {completed.stderr.decode(errors='replace')}")
    return completed.stdout.decode()


async def _serve(args: argparse.Namespace) -> None:
    name, _, password = args.user.partition(":")
    server = GitServer(Path(args.root), {name: password})
    await server.start(port=args.port, ca=trustme.CA(organization_name="sim git server"))
    assert server.ca_file is not None
    if args.ca_file:
        shutil.copyfile(server.ca_file, args.ca_file)
    print(f"serving {server.url} (root {args.root})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sim.git_server", description=__doc__)
    parser.add_argument("--root", required=True, help="directory of bare repositories")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", required=True, help="NAME:PASSWORD")
    parser.add_argument("--ca-file", default=None, help="where to write the serving CA (PEM)")
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()

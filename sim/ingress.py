"""A real nginx in front of model backends, configured as ingress-nginx renders `auth-url`.

Dev and test only (tests, bench and demo). `sites_from_ingress` reads Ingress objects (those
`shared.inference_routes.inference_ingress` builds) as ingress-nginx does: each rule's host and
backend, the `auth-url` and `auth-response-headers` annotations (split, trimmed and validated
as its `authreq` parser does), and `upstream-vhost` (the Host sent to the backend).
`render_config` is pure: it writes the directives
ingress-nginx's template (`rootfs/etc/nginx/template/nginx.tmpl`, the `$externalAuth` part,
and `buildAuthLocation` / `buildAuthResponseHeaders` in its template.go) renders for such an
Ingress, minus its Lua balancer: an internal `location = /_external-auth-<path>-<type>`
that proxies a bodiless copy of the request to the auth URL as written (its path names the
deployment) with `X-Original-URL`, `X-Original-Method`, the auth service's own `Host` and every
client header (so `Authorization` arrives), and in the protected location, which passes 401 and
403 to the client, then copies each listed response header onto the proxied request
(`proxy_set_header '<name>' $authHeader<n>`: an `Authorization` the answer lacks is set to "",
so nginx sends the model none), one of its two forms:

- the default (no `auth-keepalive`, or HTTP/2 on, ingress-nginx's default): `auth_request`,
  the check proxied with HTTP/1.1 and `Connection: close`, a new connection per check;
- `auth-keepalive` with `use-http2: "false"`: an upstream block with `keepalive`, and the
  check made by `access_by_lua_file` (ingress-nginx's `ngx_conf_external_auth.lua`, a
  `ngx.location.capture` subrequest), since `auth_request` ignores upstream keepalive (nginx
  ticket 1579). Needs the Lua module (Debian `libnginx-mod-http-lua`).

`Nginx` runs the Debian package's binary unprivileged with a prefix of its own (`-p`), in the
foreground, on 127.0.0.1; the system nginx service is never used. With `zero_cost_check` it
serves `render_zero_cost_check` instead: the cheapest possible check server (every route naming
a deployment allowed, no token read), the benchmark's ceiling for each form.
`model_backend` is a stand-in model server (KServe's v1 protocol: `POST /v1/models/<m>:predict`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import pwd
import re
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from shared.config import Settings
from shared.inference_routes import DEPLOYMENT_HEADER, inference_ingress
from shared.inference_tokens import DeploymentRef, endpoint_host
from sim.ports import free_port

AUTH_PATH = "/internal/v1/inference-auth"
# The Service name the chart gives the deployable; nginx sends it as the auth request's `Host`
# (ingress-nginx sets `Host` to the auth URL's host, never the client's).
AUTH_SERVICE_HOST = "workflow-manager-inference-auth.workflow-manager.svc"


_ANNOTATION = "nginx.ingress.kubernetes.io/"
_HEADER_NAME = re.compile(r"[a-zA-Z\d\-_]+")  # authreq's ValidHeader


@dataclass(frozen=True)
class Site:
    """One Ingress rule: a deployment's endpoint host, the model server behind it, and the
    Ingress's `auth-url` and `auth-response-headers` (None: the `ExternalAuth` defaults)."""

    host: str
    backend: str  # "127.0.0.1:<port>"
    auth_url: str | None = None
    auth_response_headers: tuple[str, ...] = ()
    # The `upstream-vhost` annotation: the Host the backend is sent (ingress-nginx:
    # `proxy_set_header Host "<vhost>"`), e.g. the predictor's cluster-local host, which the
    # Knative gateway routes on. None: the client's.
    upstream_vhost: str | None = None


def sites_from_ingress(ingress: Mapping[str, Any], *, backends: Mapping[str, str]) -> list[Site]:
    """The sites an Ingress object makes. `backends` maps each `<service>:<port>` it routes to
    onto `127.0.0.1:<port>` (what the Service's endpoints would be). ValueError for what
    ingress-nginx would deny (an invalid header name in `auth-response-headers`)."""
    annotations = ingress.get("metadata", {}).get("annotations", {}) or {}
    auth_url = annotations.get(_ANNOTATION + "auth-url")
    headers: list[str] = []
    for header in str(annotations.get(_ANNOTATION + "auth-response-headers", "")).split(","):
        header = header.strip()
        if header:
            if not _HEADER_NAME.fullmatch(header):
                raise ValueError(f"auth-response-headers: invalid header {header!r}")
            headers.append(header)
    vhost = annotations.get(_ANNOTATION + "upstream-vhost") or None
    sites = []
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            service = path["backend"]["service"]
            backend = backends[f"{service['name']}:{service['port']['number']}"]
            sites.append(Site(rule["host"], backend, auth_url, tuple(headers), vhost))
    return sites


def deployment_sites(
    refs: Sequence[DeploymentRef], *, domain: str, backend: str, auth_url: str | None = None
) -> list[Site]:
    """The sites of the deployments' Ingress objects as the platform writes them
    (`inference_ingress`, `auth_url` by default `INFERENCE_AUTH_URL`'s default), every one
    served by the model server at `backend` ("127.0.0.1:<port>")."""
    url = auth_url or Settings.model_fields["INFERENCE_AUTH_URL"].default
    sites: list[Site] = []
    for ref in refs:
        service = f"{ref.model}-{ref.environment}-predictor"
        ingress = inference_ingress(
            ref,
            host=endpoint_host(
                tenant=ref.tenant, model=ref.model, environment=ref.environment, domain=domain
            ),
            auth_url=url,
            namespace=f"tenant-{ref.tenant}",
            service=service,
            port=80,
        )
        sites += sites_from_ingress(ingress, backends={f"{service}:80": backend})
    return sites


@dataclass(frozen=True)
class ExternalAuth:
    """The auth Service behind the Ingresses' `auth-url`: `servers` are the inference_auth
    replicas (nginx balances over them round-robin, as kube-proxy would). `path` and
    `response_headers` serve only a site without an `auth_url` of its own (the nginx harness
    test's stand-in check)."""

    servers: tuple[str, ...]
    path: str = AUTH_PATH
    response_headers: tuple[str, ...] = ()
    # `auth-keepalive` (with HTTP/2 off): idle connections kept to the auth service, checked
    # through Lua. 0, ingress-nginx's default: `auth_request`, a new connection per check.
    keepalive: int = 0
    # With keepalive: ingress-nginx's Lua check (True), or plain nginx's `auth_request` over the
    # kept-alive upstream (False; not a form ingress-nginx renders).
    lua: bool = True


def auth_location(location_path: str = "/", path_type: str = "Prefix") -> str:
    """ingress-nginx's `buildAuthLocation`: the internal location's name for one Ingress path."""
    encoded = base64.urlsafe_b64encode(location_path.encode()).decode().replace("=", "")
    return f"/_external-auth-{encoded}-{path_type}"


LUA_MODULES = ("ndk_http_module.so", "ngx_http_lua_module.so")
MODULES_DIR = Path("/usr/lib/nginx/modules")
# ingress-nginx's rootfs/etc/nginx/lua/nginx/ngx_conf_external_auth.lua, the check of the
# `auth-keepalive` form: a subrequest to the internal location, its response headers copied
# into $authHeader<n> (numbered from 1 here, as the script's `ipairs` does).
EXTERNAL_AUTH_LUA = """local auth_path = ngx.var.auth_path
local auth_keepalive_share_vars = ngx.var.auth_keepalive_share_vars == "true" and true or false
local auth_response_headers = ngx.var.auth_response_headers
local ngx_re_split = require("ngx.re").split
local ipairs = ipairs
local ngx_log = ngx.log
local ngx_ERR = ngx.ERR

local res = ngx.location.capture(auth_path, {
    method = ngx.HTTP_GET, body = '',
    share_all_vars = auth_keepalive_share_vars })

if res.status == ngx.HTTP_OK then
    local header_parts, err = ngx_re_split(auth_response_headers, ",")
    if err then
       ngx_log(ngx_ERR, err)
       return
    end
    ngx.var.auth_cookie = res.header['Set-Cookie']
    for i, header_name in ipairs(header_parts) do
        local varname = "authHeader" .. tostring(i)
        ngx.var[varname] = res.header[header_name]
    end
    return
end

if res.status == ngx.HTTP_UNAUTHORIZED or res.status == ngx.HTTP_FORBIDDEN then
    ngx.exit(res.status)
end
ngx.exit(ngx.HTTP_INTERNAL_SERVER_ERROR)
"""


def lua_available() -> bool:
    """Whether this nginx can load the Lua module the `auth-keepalive` form needs."""
    return all((MODULES_DIR / module).exists() for module in LUA_MODULES)


def _header_variable(header: str) -> str:
    return header.lower().replace("-", "_")


def render_config(
    *,
    prefix: Path,
    port: int,
    sites: Sequence[Site],
    auth: ExternalAuth | None,
    plain_port: int | None = None,
    workers: int = 1,
) -> str:
    """The whole nginx.conf. `plain_port`, when given, serves the same sites without the auth
    check on a second listener (the benchmark's baseline in the same nginx)."""
    lua = auth is not None and auth.keepalive > 0 and auth.lua
    modules = [f"load_module {MODULES_DIR / module};" for module in LUA_MODULES] if lua else []
    lines = [
        *modules,
        *_http_context(prefix=prefix, workers=workers),
        # Tokens never reach the log: the request line and the deployment the check named.
        "    log_format upstreaminfo '$remote_addr [$time_local] \"$request_method $host$uri\" '",
        "        '$status $request_time $upstream_status deployment=$auth_deployment';",
        f"    access_log {prefix}/access.log upstreaminfo buffer=64k flush=1s;",
        "    map $http_upgrade $connection_upgrade { default upgrade; '' ''; }",
        "    map $http_x_request_id $req_id { default $http_x_request_id; '' $request_id; }",
    ]
    if auth is not None:
        lines.append("    upstream inference_auth {")
        lines += [f"        server {server};" for server in auth.servers]
        if auth.keepalive:
            lines += [
                f"        keepalive {auth.keepalive};",
                "        keepalive_requests 1000;",  # auth-keepalive-requests' default
                "        keepalive_timeout 60s;",  # auth-keepalive-timeout's default
            ]
        lines.append("    }")
    for index, site in enumerate(sites):
        lines += [f"    upstream model_{index} {{", f"        server {site.backend};"]
        lines += ["        keepalive 64;", "    }"]
    for index, site in enumerate(sites):
        lines += _server(
            port=port, site=site, upstream=f"model_{index}", auth=auth, lua_file=prefix / LUA_FILE
        )
        if plain_port is not None:
            lines += _server(
                port=plain_port, site=site, upstream=f"model_{index}", auth=None, lua_file=None
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _http_context(*, prefix: Path, workers: int) -> list[str]:
    """The main context up to the opening of `http {`, everything kept under `prefix`."""
    run_as = ""
    if os.geteuid() == 0:
        # Workers of a root master switch to `nobody`, who cannot write into a test's prefix.
        run_as = f"user {pwd.getpwuid(0).pw_name};\n"
    return [
        f"{run_as}daemon off;",
        f"worker_processes {workers};",
        f"pid {prefix}/nginx.pid;",
        f"error_log {prefix}/error.log warn;",
        "events { worker_connections 4096; }",
        "http {",
        f"    client_body_temp_path {prefix}/client-body;",
        f"    proxy_temp_path {prefix}/proxy-temp;",
        f"    fastcgi_temp_path {prefix}/fastcgi-temp;",
        f"    uwsgi_temp_path {prefix}/uwsgi-temp;",
        f"    scgi_temp_path {prefix}/scgi-temp;",
        "    server_tokens off;",
        "    uninitialized_variable_warn off;",
        "    keepalive_requests 10000;",
    ]


def render_zero_cost_check(*, prefix: Path, port: int, workers: int = 1) -> str:
    """nginx.conf of the cheapest possible check server (the benchmark's ceiling): every
    request under AUTH_PATH naming a deployment is a 200 with `X-Inference-Deployment` set to
    the deployment its route names, no token read, no log."""
    route = AUTH_PATH + "/([^/?]+/[^/?]+/[^/?]+)"
    return (
        "\n".join(
            [
                *_http_context(prefix=prefix, workers=workers),
                "    access_log off;",
                "    server {",
                f"        listen 127.0.0.1:{port};",
                f"        location ~ ^{route} {{",
                f"            add_header {DEPLOYMENT_HEADER} $1;",
                "            return 200;",
                "        }",
                "        location / { return 403; }",
                "    }",
                "}",
            ]
        )
        + "\n"
    )


LUA_FILE = "external_auth.lua"


def _server(
    *, port: int, site: Site, upstream: str, auth: ExternalAuth | None, lua_file: Path | None
) -> list[str]:
    lines = [
        "    server {",
        f"        listen 127.0.0.1:{port};",
        f"        server_name {site.host};",
        '        set $auth_deployment "-";',
    ]
    protect: list[str] = []
    if auth is not None:
        internal = auth_location()
        auth_path, auth_host = auth.path, AUTH_SERVICE_HOST
        response_headers = auth.response_headers
        if site.auth_url is not None:
            # The Ingress's own auth-url (ingress-nginx: `set $target <auth-url>`, the host
            # and port replaced by the auth upstream's name with auth-keepalive).
            parts = urlsplit(site.auth_url)
            auth_path = parts.path + (f"?{parts.query}" if parts.query else "")
            auth_host = parts.hostname or AUTH_SERVICE_HOST
            response_headers = site.auth_response_headers
        lines += [
            f"        location = {internal} {{",
            "            internal;",
            "            proxy_pass_request_body off;",
            '            proxy_set_header Content-Length "";',
            '            proxy_set_header X-Forwarded-Proto "";',
            "            proxy_set_header X-Request-ID $req_id;",
            f"            proxy_set_header Host {auth_host};",
            "            proxy_set_header X-Original-URL $scheme://$http_host$request_uri;",
            "            proxy_set_header X-Original-Method $request_method;",
            '            proxy_set_header X-Sent-From "nginx-ingress-controller";',
            "            proxy_set_header X-Real-IP $remote_addr;",
            "            proxy_set_header X-Forwarded-For $remote_addr;",
            "            proxy_set_header X-Auth-Request-Redirect $request_uri;",
            "            proxy_buffering off;",
            "            proxy_buffer_size 4k;",
            "            proxy_buffers 4 4k;",
            "            proxy_request_buffering on;",
            "            proxy_ssl_server_name on;",
            "            proxy_pass_request_headers on;",
            "            proxy_http_version 1.1;",
        ]
        if auth.keepalive:
            # auth-keepalive: an empty Connection header keeps the upstream connection open
            # (without, nginx's proxy sends `Connection: close`).
            lines.append('            proxy_set_header Connection "";')
        lines += [
            f"            set $target http://inference_auth{auth_path};",
            "            proxy_pass $target;",
            "        }",
        ]
    if auth is not None and auth.keepalive and auth.lua:
        # `auth_request` ignores upstream keepalive: ingress-nginx checks through Lua.
        protect = [
            "            # this location requires authentication",
            "            set $auth_cookie '';",
            "            add_header Set-Cookie $auth_cookie;",
        ]
        for number, header in enumerate(auth.response_headers):
            protect += [
                f"            set $authHeader{number} '';",
                f"            proxy_set_header '{header}' $authHeader{number};",
            ]
        protect += [
            f"            set $auth_path '{auth_location()}';",
            "            set $auth_keepalive_share_vars false;",
            f"            set $auth_response_headers '{','.join(auth.response_headers)}';",
            f"            access_by_lua_file {lua_file};",
        ]
    elif auth is not None:
        internal = auth_location()
        protect = [
            "            # this location requires authentication",
            f"            auth_request {internal};",
            "            auth_request_set $auth_cookie $upstream_http_set_cookie;",
            "            add_header Set-Cookie $auth_cookie;",
        ]
        for number, header in enumerate(response_headers):
            variable = _header_variable(header)
            protect += [
                f"            auth_request_set $authHeader{number} $upstream_http_{variable};",
                f"            proxy_set_header '{header}' $authHeader{number};",
            ]
        if response_headers:
            # For the access log: the first response header names the deployment.
            variable = _header_variable(response_headers[0])
            protect.append(
                f"            auth_request_set $auth_deployment $upstream_http_{variable};"
            )
    lines += [
        "        location / {",
        *protect,
        (
            f'            proxy_set_header Host "{site.upstream_vhost}";'
            if site.upstream_vhost
            else "            proxy_set_header Host $http_host;"
        ),
        "            proxy_set_header Upgrade $http_upgrade;",
        "            proxy_set_header Connection $connection_upgrade;",
        "            proxy_set_header X-Request-ID $req_id;",
        "            proxy_set_header X-Real-IP $remote_addr;",
        "            proxy_set_header X-Forwarded-For $remote_addr;",
        "            proxy_set_header X-Forwarded-Host $http_host;",
        "            proxy_set_header X-Forwarded-Proto $scheme;",
        '            proxy_set_header Proxy "";',
        "            proxy_http_version 1.1;",
        "            proxy_buffering off;",
        f"            proxy_pass http://{upstream};",
        "        }",
        "    }",
    ]
    return lines


@dataclass
class Nginx:
    """One nginx process with its own prefix directory, started and stopped by its owner."""

    prefix: Path
    sites: Sequence[Site]
    auth: ExternalAuth | None
    port: int = field(default_factory=free_port)
    plain_port: int | None = None
    workers: int = 1
    # Serve `render_zero_cost_check` instead (sites and auth ignored): the benchmark's ceiling.
    zero_cost_check: bool = False
    _process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.prefix / "access.log"

    def _prepare(self) -> list[str]:
        """Write the configuration into the prefix; the command line that runs it."""
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise RuntimeError("nginx is not installed: run scripts/ensure-services.sh")
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        error_log = self.prefix / "error.log"
        if self.zero_cost_check:
            conf.write_text(
                render_zero_cost_check(prefix=self.prefix, port=self.port, workers=self.workers)
            )
            return [binary, "-p", f"{self.prefix}/", "-c", str(conf), "-e", str(error_log)]
        conf.write_text(
            render_config(
                prefix=self.prefix,
                port=self.port,
                sites=self.sites,
                auth=self.auth,
                plain_port=self.plain_port,
                workers=self.workers,
            )
        )
        if self.auth is not None and self.auth.keepalive and self.auth.lua:
            if not lua_available():
                raise RuntimeError(
                    "auth-keepalive needs nginx's Lua module (libnginx-mod-http-lua)"
                )
            (self.prefix / LUA_FILE).write_text(EXTERNAL_AUTH_LUA)
        return [binary, "-p", f"{self.prefix}/", "-c", str(conf), "-e", str(error_log)]

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self._prepare(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = asyncio.get_running_loop().time() + 10
        while not await _accepts(self.port):
            if self._process.returncode is not None:
                raise RuntimeError(f"nginx exited: {self._error_tail()}")
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise RuntimeError(f"nginx did not listen: {self._error_tail()}")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        # SIGTERM: nginx's fast shutdown; the master waits for its workers before exiting.
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    def _error_tail(self) -> str:
        log = self.prefix / "error.log"
        return log.read_text()[-2000:] if log.exists() else "(no error log)"

    async def __aenter__(self) -> Nginx:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _accepts(port: int) -> bool:
    with contextlib.suppress(OSError):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
    return False


@dataclass
class BackendCalls:
    """What the stand-in model server saw: how many predictions, and the headers of the last."""

    count: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)


CALLS = web.AppKey("calls", BackendCalls)


def model_backend() -> web.Application:
    """A model server answering `POST /v1/models/<model>:predict` with JSON."""

    async def predict(request: web.Request) -> web.Response:
        calls = request.app[CALLS]
        calls.count += 1
        calls.last_headers = dict(request.headers)
        await request.read()
        return web.json_response(
            {"model_name": request.match_info["model"], "predictions": [[0.25, 0.75]]}
        )

    app = web.Application()
    app[CALLS] = BackendCalls()
    app.router.add_post("/v1/models/{model}:predict", predict)
    return app


async def start_app(app: web.Application, *, port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve an aiohttp app on 127.0.0.1 (a free port unless given); returns its runner and port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = port or free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, port


def empty_handler() -> web.Application:
    """The least an aiohttp handler can do: the benchmark's yardstick for inference_auth."""

    async def empty(request: web.Request) -> web.Response:
        return web.Response()

    app = web.Application()
    app.router.add_get(AUTH_PATH + "{route:(/.*)?}", empty)
    return app


def main() -> None:
    """`python -m sim.ingress {model,empty} --port P`: one server in a process of its own, so a
    benchmark measures it without sharing the measuring process's event loop."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("app", choices=["model", "empty"])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = model_backend() if args.app == "model" else empty_handler()
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()

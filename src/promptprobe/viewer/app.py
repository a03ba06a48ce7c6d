"""The viewer's web app (Starlette): GET only, every page also as JSON at its URL plus `.json`,
every byte of a run escaped by the templates, one script of our own and nothing from a network.

Requests only read: a run id, case id or sample id is checked before it touches the disk, and a
Host header other than the address served is refused (a web page elsewhere cannot reach the
viewer through a DNS name pointed at 127.0.0.1).
"""

import contextlib
import hashlib
import ipaddress
import threading
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import InputError
from ..jsonio import dumps_pretty, warn
from ..views.html import environment, forest, plots_of
from ..views.report import sequential_sentence
from . import pages
from .pages import NotFound
from .runs import RunsDir

STATIC = Path(__file__).parent / "static"
POLL_MS = 2000
WARM_EVERY = 2.0  # seconds between the background's looks at the runs directory
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


# -- addresses of the pages (the templates call these) ----------------------------------------


def _query(**params: Any) -> str:
    given = {k: v for k, v in params.items() if v not in (None, "", 1) or (k != "page" and v == 1)}
    return ("?" + urlencode(given)) if given else ""


def run_url(run_id: str, suffix: str = "") -> str:
    return f"/runs/{quote(run_id)}{suffix}"


def case_url(run_id: str, case_id: str, arm: int | None = None, page: int = 1, suffix: str = "") -> str:
    return f"/runs/{quote(run_id)}/cases/{quote(case_id)}{suffix}" + _query(arm=arm, page=page)


def raw_url(run_id: str, sample_id: str, arm: int | None = None, case_id: str | None = None) -> str:
    return f"/runs/{quote(run_id)}/raw/{quote(sample_id)}" + _query(arm=arm, case=case_id)


def why_url(run_id: str, arm: int, metric: str, phrase: str | None = None, page: int = 1) -> str:
    return f"/runs/{quote(run_id)}/why" + _query(arm=arm, metric=metric, phrase=phrase, page=page)


def search_url(run_id: str, filters: dict[str, Any] | None = None, page: int = 1) -> str:
    given = {k: v for k, v in (filters or {}).items() if v not in (None, "", False)}
    if given.get("failing") is True:
        given["failing"] = 1
    return f"/runs/{quote(run_id)}/search" + _query(**given, page=page)


def compare_url(a: str | None = None, b: str | None = None, metric: str | None = None, page: int = 1) -> str:
    return "/compare" + _query(a=a, b=b, metric=metric, page=page)


def json_url(request: Request) -> str:
    path = request.url.path.rstrip("/") or ""
    return (path + ".json") + (("?" + request.url.query) if request.url.query else "")


# -- responses ---------------------------------------------------------------------------------


def _send(request: Request, body: bytes, media_type: str, status: int = 200, **headers: str) -> Response:
    tag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
    if status == 200 and request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers={"ETag": tag, **SECURITY_HEADERS})
    return Response(body, status, {"ETag": tag, **SECURITY_HEADERS, **headers}, media_type=media_type)


class HostCheck:
    """Refuse a request whose Host header names another host than those served, or another port
    than `port` (400): a page elsewhere that points a DNS name at the viewer's address cannot read
    it. `any_ip`: any IP address is a name too (an IP literal cannot be rebound to another machine)."""

    def __init__(self, app: Any, allowed: list[str], port: int | None = None, any_ip: bool = False) -> None:
        self.app = app
        self.allowed = {name.lower() for name in allowed}
        self.port = port
        self.any_ip = any_ip

    def accepts(self, host: str) -> bool:
        if host.startswith("["):
            name, _, rest = host[1:].partition("]")
            port = rest.removeprefix(":") if rest.startswith(":") else None
            if rest and port is None:
                return False
        else:
            name, colon, port_text = host.rpartition(":")
            name, port = (name, port_text) if colon else (host, None)
        if self.port is not None and (port or "80") != str(self.port):
            return False
        return name.lower() in self.allowed or (self.any_ip and _is_ip(name))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not self.accepts(host):
                await Response("Invalid host header", 400, media_type="text/plain")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Viewer:
    """The app's state: the runs directory, the templates and the background counter."""

    def __init__(self, runs_dir: Any, warm: bool = True, poll_ms: int = POLL_MS) -> None:
        self.runs = RunsDir(runs_dir, pages.run_line, background=warm, follower_for=pages.search_follower)
        self.env = environment()
        self.env.globals.update(
            run_url=run_url,
            case_url=case_url,
            raw_url=raw_url,
            why_url=why_url,
            compare_url=compare_url,
            search_url=search_url,
            cell_link=lambda run_id: lambda case_id, arm: case_url(run_id, case_id, arm),
            raw_link=lambda run_id, arm, case_id: lambda sample_id: raw_url(run_id, sample_id, arm, case_id),
            phrase_link=lambda run_id, arm, metric: lambda phrase: why_url(run_id, arm, metric, phrase),
        )
        self.warm = warm
        self.poll_ms = poll_ms
        self.stop = threading.Event()

    def render(
        self, request: Request, template: str, view: dict[str, Any], status: int = 200, **extra: Any
    ) -> Response:
        html = self.env.get_template(template).render(
            view=view, json_url=json_url(request), poll_ms=self.poll_ms, **extra
        )
        return _send(request, html.encode("utf-8"), "text/html; charset=utf-8", status)

    def page(
        self, request: Request, template: str, build: Callable[[], dict[str, Any]], as_json: bool,
        extra: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Response:  # fmt: skip
        try:
            view = build()
        except NotFound as exc:
            return self.problem(request, 404, str(exc), as_json)
        except InputError as exc:
            return self.problem(request, 422, str(exc), as_json)
        if as_json:
            return _send(request, dumps_pretty(view).encode("utf-8"), "application/json")
        return self.render(request, template, view, **(extra(view) if extra else {}))

    def problem(self, request: Request, status: int, message: str, as_json: bool) -> Response:
        if as_json:
            return _send(
                request, dumps_pretty({"error": message}).encode("utf-8"), "application/json", status
            )
        return self.render(request, "viewer_problem.html.j2", {"error": message}, status)

    def warm_forever(self) -> None:
        """Count every run in the background, newest first, so its page opens without waiting, and
        index the newest for search."""
        while not self.stop.is_set():
            try:
                self.runs.warm()
                pages.index_newest(self.runs)
            except Exception as exc:  # the loop goes on: a page counts its run itself and says why not
                warn(f"probe view: counting runs in the background: {exc}")
            self.stop.wait(WARM_EVERY)


def _int(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    return int(value) if value is not None and value.isdigit() else None


def _split(name: str) -> tuple[str, bool]:
    return (name[: -len(".json")], True) if name.endswith(".json") else (name, False)


def _viewer(request: Request) -> Viewer:
    return request.app.state.viewer


def runs_handler(request: Request) -> Response:
    viewer = _viewer(request)
    build = partial(pages.runs_page, viewer.runs)
    return viewer.page(request, "viewer_runs.html.j2", build, request.url.path.endswith(".json"))


def _run_extra(view: dict[str, Any]) -> dict[str, Any]:
    """What the run page shows beside its view object: the forest plots and the sequential sentence."""
    if "report" not in view:
        return {"plots": [], "sequential": None}
    sequential = view["report"].get("sequential")
    return {"plots": plots_of(view), "sequential": sequential_sentence(sequential) if sequential else None}


def run_handler(request: Request) -> Response:
    viewer = _viewer(request)
    run_id, as_json = _split(request.path_params["run_id"])
    if viewer.runs.path_of(request.path_params["run_id"]) is not None:
        run_id, as_json = request.path_params["run_id"], False
    build = partial(pages.run_page, viewer.runs, run_id)
    return viewer.page(request, "viewer_run.html.j2", build, as_json, _run_extra)


def case_handler(request: Request) -> Response:
    viewer = _viewer(request)
    case_id, as_json = _split(request.path_params["case_id"])
    run_id = request.path_params["run_id"]

    def build() -> dict[str, Any]:
        return pages.case_page(viewer.runs, run_id, case_id, _int(request, "arm"), _int(request, "page") or 1)

    return viewer.page(request, "viewer_case.html.j2", build, as_json)


def incident_handler(request: Request) -> Response:
    viewer = _viewer(request)
    run_id, case_id = request.path_params["run_id"], request.path_params["case_id"]
    fmt = "json" if request.url.path.endswith(".json") else "md"
    try:
        text = pages.incident(viewer.runs, run_id, case_id, fmt)
    except NotFound as exc:
        return viewer.problem(request, 404, str(exc), False)
    name = f"{run_id}-{case_id}.{fmt}"
    media = "application/json" if fmt == "json" else "text/markdown; charset=utf-8"
    return _send(
        request, text.encode("utf-8"), media, **{"Content-Disposition": f'attachment; filename="{name}"'}
    )


def raw_handler(request: Request) -> Response:
    viewer = _viewer(request)
    run_id, sample_id = request.path_params["run_id"], request.path_params["sample_id"]
    try:
        data, _ = pages.raw_bytes(
            viewer.runs, run_id, sample_id, _int(request, "arm"), request.query_params.get("case")
        )
    except NotFound as exc:
        return viewer.problem(request, 404, str(exc), False)
    except InputError as exc:
        return viewer.problem(request, 422, str(exc), False)
    headers = {
        "Content-Disposition": f'attachment; filename="{sample_id}.txt"',
        "X-Raw-SHA256": hashlib.sha256(data).hexdigest(),
    }
    return _send(request, data, "application/octet-stream", **headers)


def compare_handler(request: Request) -> Response:
    viewer = _viewer(request)
    params = request.query_params

    def build() -> dict[str, Any]:
        return pages.compare_page(
            viewer.runs, params.get("a"), params.get("b"), params.get("metric"), _int(request, "page") or 1
        )

    return viewer.page(
        request, "viewer_compare.html.j2", build, request.url.path.endswith(".json"), _compare_plots
    )


def why_handler(request: Request) -> Response:
    viewer = _viewer(request)
    params = request.query_params
    run_id = request.path_params["run_id"]

    def build() -> dict[str, Any]:
        return pages.why_page(
            viewer.runs,
            run_id,
            _int(request, "arm"),
            params.get("metric"),
            params.get("phrase"),
            _int(request, "page") or 1,
        )

    return viewer.page(request, "viewer_why.html.j2", build, request.url.path.endswith(".json"))


def search_handler(request: Request) -> Response:
    viewer = _viewer(request)
    run_id = request.path_params["run_id"]
    params = {k: request.query_params.get(k) for k in ("q", "failing", "header", "tag", "metric", "arm")}

    def build() -> dict[str, Any]:
        return pages.search_page(viewer.runs, run_id, params, _int(request, "page") or 1)

    return viewer.page(request, "viewer_search.html.j2", build, request.url.path.endswith(".json"))


def script_handler(request: Request) -> Response:
    return _send(request, (STATIC / "viewer.js").read_bytes(), "text/javascript; charset=utf-8")


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """Count runs in the background while the app serves (when the viewer is warm)."""
    viewer: Viewer = app.state.viewer
    worker = threading.Thread(target=viewer.warm_forever, name="probe-view-counting", daemon=True)
    if viewer.warm:
        worker.start()
    yield
    viewer.stop.set()


ROUTES = [
    Route("/", runs_handler),
    Route("/.json", runs_handler),
    Route("/compare", compare_handler),
    Route("/compare.json", compare_handler),
    Route("/static/viewer.js", script_handler),
    Route("/runs/{run_id}/search", search_handler),
    Route("/runs/{run_id}/search.json", search_handler),
    Route("/runs/{run_id}/why", why_handler),
    Route("/runs/{run_id}/why.json", why_handler),
    Route("/runs/{run_id}/cases/{case_id}/incident.md", incident_handler),
    Route("/runs/{run_id}/cases/{case_id}/incident.json", incident_handler),
    Route("/runs/{run_id}/cases/{case_id}", case_handler),
    Route("/runs/{run_id}/raw/{sample_id}", raw_handler),
    Route("/runs/{run_id}", run_handler),
]


def create_app(
    runs_dir: str | Path,
    *,
    warm: bool = True,
    poll_ms: int = POLL_MS,
    hosts: list[str] | None = None,
    port: int | None = None,
    any_ip: bool = False,
) -> Starlette:
    """The viewer over `runs_dir` (`warm`: count runs in the background; `hosts`: the Host names
    accepted, default those of a loopback address; `port`: the port a Host must name, any when
    None; `any_ip`: an IP address is accepted as a Host name too)."""
    allowed = hosts or ["127.0.0.1", "localhost", "::1"]
    app = Starlette(
        routes=ROUTES,
        middleware=[Middleware(HostCheck, allowed=allowed, port=port, any_ip=any_ip)],
        lifespan=_lifespan,
    )
    app.state.viewer = Viewer(runs_dir, warm, poll_ms)
    return app


def _compare_plots(view: dict[str, Any]) -> dict[str, Any]:
    comparison = view.get("comparison")
    if not comparison:
        return {"plots": {}}
    return {
        "plots": {
            r["metric"]: forest(
                [{**r["a"], "label": f"A: {r['a']['name']}"}, {**r["b"], "label": f"B: {r['b']['name']}"}]
            )
            for r in comparison["verdicts"]["results"]
        }
    }

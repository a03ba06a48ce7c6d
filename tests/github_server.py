"""A local stand-in for the GitHub REST API's issue comments, on 127.0.0.1: the calls the gate's
comment makes (list a pull request's comments, page by page; create one; update one), with the
status codes GitHub gives (401 without a token, 403 with a read-only one, 404 for a comment that
does not exist), so the Action's steps can be run against it over loopback."""

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

LIST = re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<number>\d+)/comments")
ONE = re.compile(r"/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)")


@dataclass
class Call:
    method: str
    path: str
    authorization: str | None
    body: Any


@dataclass
class GitHubServer:
    repository: str
    token: str
    read_only_token: str = "read-only-token"
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # issue -> comments
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.next_id = 1000
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                """Quiet."""

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                status, reply = server.answer(self.command, self.path, self.headers.get("authorization"), body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("connection", "close")
                self.close_connection = True
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def answer(self, method: str, target: str, auth: str | None, body: Any) -> tuple[int, Any]:
        parts = urlsplit(target)
        with self.lock:
            self.calls.append(Call(method, parts.path, auth, body))
            if auth not in (f"Bearer {self.token}", f"Bearer {self.read_only_token}"):
                return 401, {"message": "Bad credentials"}
            listing, one = LIST.fullmatch(parts.path), ONE.fullmatch(parts.path)
            match = listing or one
            if match is None or match["repo"] != self.repository:
                return 404, {"message": "Not Found"}
            if listing and method == "GET":
                query = parse_qs(parts.query)
                per_page, page = int(query.get("per_page", ["30"])[0]), int(query.get("page", ["1"])[0])
                found = self.comments.get(int(listing["number"]), [])
                return 200, found[(page - 1) * per_page : page * per_page]
            if auth != f"Bearer {self.token}":
                return 403, {"message": "Resource not accessible by integration"}
            if listing and method == "POST":
                self.next_id += 1
                comment = self._comment(self.next_id, int(listing["number"]), body["body"])
                self.comments.setdefault(int(listing["number"]), []).append(comment)
                return 201, comment
            if one and method == "PATCH":
                for comments in self.comments.values():
                    for comment in comments:
                        if comment["id"] == int(one["id"]):
                            comment["body"] = body["body"]
                            return 200, comment
            return 404, {"message": "Not Found"}

    def _comment(self, comment_id: int, issue: int, body: str) -> dict[str, Any]:
        url = f"https://github.example/{self.repository}/pull/{issue}#issuecomment-{comment_id}"
        return {"id": comment_id, "body": body, "html_url": url, "user": {"login": "someone"}}

    def __enter__(self) -> "GitHubServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

"""A local server speaking the providers' batch wire formats over real sockets: OpenAI files
upload, batch create / list / retrieve / cancel, output and error files (also under Azure's
/openai paths with api-version); Anthropic Message Batches create / list / retrieve / cancel and
the JSONL results stream. Batches end after a set number of polls; requests can fail, expire or
be cancelled; every submission is counted, so a test can tell whether anything went out twice.
Plain (live) Chat Completions and Messages calls are answered too.

It is hostile on request: `fault(kind, n, handle, request)` decides every batch API call (kind: upload,
create, list, retrieve, download, cancel; n: how many calls of that kind so far, this one
included; `handle()` does what the API would and returns its reply): answer an error without
doing anything, do it and answer late or never (a create that blocks), cut the body, or answer
an HTML page. `seen[kind]` is set as a call of that kind arrives, so a test waits for readiness
instead of sleeping. An answer of ("line", X) makes that request's result line X itself (a dict
of odd-typed fields, or raw bytes)."""

import json
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servers import LocalServer, Reply, Request, anthropic_body, openai_body

# What becomes of one request: text to answer with, ("error", status or error type), "expired",
# or ("line", the result line itself).
Outcome = str | tuple[str, Any]
Fault = Callable[[str, int, Callable[[], Reply], Request], Reply]
HTML = b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"


def default_answer(custom_id: str, body: dict[str, Any]) -> Outcome:
    return "[[ANSWER]]\nok"


def no_fault(kind: str, n: int, handle: Callable[[], Reply], request: Request) -> Reply:
    return handle()


def error_reply(status: int, message: str = "scripted") -> Reply:
    return Reply(status=status, body=json.dumps({"error": {"message": message, "type": "server_error"}}).encode())


def html_reply() -> Reply:
    return Reply(body=HTML, content_type="text/html")


@dataclass
class Batch:
    id: str
    api: str  # "openai" or "anthropic"
    requests: list[tuple[str, dict[str, Any]]]
    polls_left: int
    status: str
    expire: bool = False
    cancelled: bool = False
    results: bytes = b""
    errors: bytes = b""
    created: float = field(default_factory=time.time)
    input_file_id: str | None = None
    metadata: dict[str, Any] | None = None


def _multipart_file(request: Request) -> bytes:
    boundary = re.search(r"boundary=(\S+)", request.headers["content-type"]).group(1).strip('"').encode()
    for part in request.body.split(b"--" + boundary):
        head, _, content = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return content[: -2] if content.endswith(b"\r\n") else content
    raise ValueError("no file part")


class BatchServer(LocalServer):
    """`polls`: looks at a batch before it ends; `answer(custom_id, body)`: each request's fate;
    `expire_first`: the first N batches expire before they reach any request; `fault`: see above."""

    def __init__(self, polls: int = 1, answer: Callable[[str, dict[str, Any]], Outcome] = default_answer,
                 expire_first: int = 0, fault: Fault = no_fault) -> None:
        super().__init__(self.route)
        self.polls = polls
        self.answer = answer
        self.expire_first = expire_first
        self.fault = fault
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, Batch] = {}
        self.submitted: list[dict[str, Any]] = []  # every request body ever submitted in a batch
        self.cancels = 0
        self.calls: dict[str, int] = defaultdict(int)  # batch API calls by kind
        self.seen: dict[str, threading.Event] = defaultdict(threading.Event)
        self.times: dict[str, list[float]] = defaultdict(list)  # when each call of a kind arrived
        self.state_lock = threading.Lock()

    # -- routing ---------------------------------------------------------------------------

    def route(self, request: Request) -> Reply:
        path, _, query = request.path.partition("?")
        if path.startswith("/openai/"):  # Azure: the same API under /openai, api-version in the query
            assert "api-version=" in query, request.path
            path = "/v1/" + path[len("/openai/"):]
        found = self._endpoint(request, path, query)
        if found is None:
            return Reply("[[ANSWER]]\nlive")  # a live call: rendered in the API's own format
        kind, handle = found
        with self.state_lock:
            self.calls[kind] += 1
            n = self.calls[kind]
            self.times[kind].append(time.monotonic())
        self.seen[kind].set()

        def locked() -> Reply:
            with self.state_lock:
                return handle()

        return self.fault(kind, n, locked, request)

    def _endpoint(self, request: Request, path: str, query: str) -> tuple[str, Callable[[], Reply]] | None:
        params = dict(part.split("=", 1) for part in query.split("&") if "=" in part)
        if path == "/v1/files" and request.method == "POST":
            return "upload", lambda: self._upload(request)
        if path in ("/v1/batches", "/v1/messages/batches"):
            api = "openai" if path == "/v1/batches" else "anthropic"
            if request.method == "POST":
                return "create", lambda: (self._create_openai if api == "openai" else self._create_anthropic)(request)
            return "list", lambda: self._list(api, params)
        match = re.fullmatch(r"/v1/(?:messages/)?batches/([^/]+)(/cancel|/results)?", path)
        if match:
            batch_id, action = match.groups()
            if action == "/cancel":
                return "cancel", lambda: self._cancel(batch_id)
            if action == "/results":
                return "download", lambda: Reply(body=self.batches[batch_id].results, content_type="application/binary")
            return "retrieve", lambda: self._retrieve(batch_id)
        match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
        if match:
            file_id = match.group(1)
            return "download", lambda: (Reply(body=self.files[file_id], content_type="application/octet-stream")
                                        if file_id in self.files else error_reply(404, f"no file {file_id}"))
        return None

    @staticmethod
    def _json(value: Any, status: int = 200) -> Reply:
        return Reply(body=json.dumps(value).encode(), status=status)

    def _upload(self, request: Request) -> Reply:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = _multipart_file(request)
        return self._json({"id": file_id, "object": "file", "bytes": len(self.files[file_id]), "created_at": 0,
                           "filename": "input.jsonl", "purpose": "batch", "status": "processed"})

    def _create_openai(self, request: Request) -> Reply:
        payload = request.json
        lines = [json.loads(line) for line in self.files[payload["input_file_id"]].splitlines() if line.strip()]
        requests = [(line["custom_id"], line["body"]) for line in lines]
        batch = self._new("openai", requests)
        batch.input_file_id, batch.metadata = payload["input_file_id"], payload.get("metadata")
        return self._json(self._view(batch))

    def _create_anthropic(self, request: Request) -> Reply:
        requests = [(item["custom_id"], item["params"]) for item in request.json["requests"]]
        return self._json(self._view(self._new("anthropic", requests)))

    def _new(self, api: str, requests: list[tuple[str, dict[str, Any]]]) -> Batch:
        prefix = "batch_" if api == "openai" else "msgbatch_"
        batch = Batch(f"{prefix}{len(self.batches) + 1:04d}", api, requests, self.polls,
                      "validating" if api == "openai" else "in_progress")
        batch.expire = len(self.batches) < self.expire_first
        self.batches[batch.id] = batch
        self.submitted.extend(body for _, body in requests)
        return batch

    def _list(self, api: str, params: dict[str, str]) -> Reply:
        """Newest first, `limit` a page, `after` (OpenAI) or `after_id` (Anthropic) the cursor."""
        ours = [b for b in reversed(list(self.batches.values())) if b.api == api]
        cursor = params.get("after") or params.get("after_id")
        if cursor:
            ours = ours[[b.id for b in ours].index(cursor) + 1:]
        limit = int(params.get("limit", 20))
        page = ours[:limit]
        data = [self._view(b) for b in page]
        return self._json({"object": "list", "data": data, "has_more": len(ours) > limit,
                           "first_id": page[0].id if page else None, "last_id": page[-1].id if page else None})

    def _cancel(self, batch_id: str) -> Reply:
        self.cancels += 1
        self.batches[batch_id].cancelled = True
        return self._json(self._view(self.batches[batch_id]))

    def _retrieve(self, batch_id: str) -> Reply:
        self._poll(self.batches[batch_id])
        return self._json(self._view(self.batches[batch_id]))

    # -- progress ----------------------------------------------------------------------------

    def _poll(self, batch: Batch) -> None:
        if batch.status in ("completed", "expired", "cancelled", "ended"):
            return
        if batch.cancelled:
            self._finish(batch, cancelled=True)
            return
        batch.polls_left -= 1
        if batch.polls_left <= 0:
            self._finish(batch)
        elif batch.api == "openai":
            batch.status = "in_progress"

    def _finish(self, batch: Batch, cancelled: bool = False) -> None:
        ok_lines, error_lines = [], []
        for custom_id, body in batch.requests:
            fate: Outcome = "expired" if batch.expire else ("cancelled" if cancelled else self.answer(custom_id, body))
            if isinstance(fate, tuple) and fate[0] == "line":
                line = fate[1]
                ok_lines.append(line if isinstance(line, bytes) else json.dumps(line).encode())
                continue
            line, is_error = (self._openai_line if batch.api == "openai" else self._anthropic_line)(custom_id, body, fate)
            if line is not None:
                (error_lines if is_error else ok_lines).append(json.dumps(line).encode())
        batch.results = b"".join(line + b"\n" for line in ok_lines + (
            error_lines if batch.api == "anthropic" else []))
        batch.errors = b"".join(line + b"\n" for line in error_lines)
        if batch.api == "openai":
            batch.status = "cancelled" if cancelled else ("expired" if batch.expire else "completed")
            if ok_lines:
                self.files[f"{batch.id}-output"] = batch.results
            if error_lines:
                self.files[f"{batch.id}-errors"] = batch.errors
        else:
            batch.status = "ended"

    def _openai_line(self, custom_id: str, body: dict[str, Any], fate: Outcome) -> tuple[dict | None, bool]:
        base = {"id": f"batch_req_{custom_id}", "custom_id": custom_id}
        if fate == "expired":
            return dict(base, response=None, error={"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}), True
        if fate == "cancelled":
            return None, True  # a cancelled request has no line at all
        if isinstance(fate, tuple):
            status = fate[1]
            return dict(base, response={"status_code": status, "request_id": f"req_{custom_id}",
                                        "body": {"error": {"message": f"scripted {status}", "type": "server_error"}}},
                        error=None), False
        reply = json.loads(openai_body(fate, body["model"], None))
        return dict(base, response={"status_code": 200, "request_id": f"req_{custom_id}", "body": reply}, error=None), False

    def _anthropic_line(self, custom_id: str, body: dict[str, Any], fate: Outcome) -> tuple[dict | None, bool]:
        if fate == "expired":
            return {"custom_id": custom_id, "result": {"type": "expired"}}, True
        if fate == "cancelled":
            return {"custom_id": custom_id, "result": {"type": "canceled"}}, True
        if isinstance(fate, tuple):
            error_type = fate[1]
            return {"custom_id": custom_id, "result": {"type": "errored", "error": {
                "type": "error", "error": {"type": error_type, "message": f"scripted {error_type}"}}}}, True
        message = json.loads(anthropic_body(fate, body["model"], None))
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}, False

    # -- views -------------------------------------------------------------------------------

    def _view(self, batch: Batch) -> dict[str, Any]:
        if batch.api == "anthropic":
            return self._anthropic_view(batch)
        total = len(batch.requests)
        ended = batch.status in ("completed", "expired", "cancelled")
        failed = batch.errors.count(b"\n") if ended else 0
        status = "cancelling" if batch.cancelled and not ended else batch.status
        return {
            "id": batch.id, "object": "batch", "endpoint": "/v1/chat/completions", "errors": None,
            "input_file_id": batch.input_file_id or "file-x", "completion_window": "24h", "status": status,
            "output_file_id": f"{batch.id}-output" if f"{batch.id}-output" in self.files else None,
            "error_file_id": f"{batch.id}-errors" if f"{batch.id}-errors" in self.files else None,
            "created_at": int(batch.created), "request_counts": {
                "total": total, "completed": (total - failed) if ended else 0, "failed": failed},
            "metadata": batch.metadata,
        }

    def _anthropic_view(self, batch: Batch) -> dict[str, Any]:
        ended = batch.status == "ended"
        counts = {"processing": 0 if ended else len(batch.requests), "succeeded": 0, "errored": 0, "canceled": 0,
                  "expired": 0}
        if ended:
            for line in batch.results.splitlines():
                try:
                    kind = json.loads(line)["result"]["type"]
                except (ValueError, KeyError, TypeError):
                    kind = None
                kind = kind if isinstance(kind, str) else "errored"  # an odd line a test scripted
                counts[{"succeeded": "succeeded", "errored": "errored", "canceled": "canceled",
                        "expired": "expired"}.get(kind, "errored")] += 1
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(batch.created))
        return {
            "id": batch.id, "type": "message_batch",
            "processing_status": "canceling" if batch.cancelled and not ended else batch.status,
            "request_counts": counts, "ended_at": "2026-11-30T00:00:00Z" if ended else None,
            "created_at": created, "expires_at": "2026-12-01T00:00:00Z",
            "archived_at": None, "cancel_initiated_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

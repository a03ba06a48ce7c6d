"""A local server speaking the providers' batch wire formats over real sockets: OpenAI files
upload, batch create / retrieve / cancel, output and error files (also under Azure's /openai
paths with api-version); Anthropic Message Batches create / retrieve / cancel and the JSONL
results stream. Batches end after a set number of polls; requests can fail, expire or be
cancelled; every submission is counted, so a test can tell whether anything went out twice.
Plain (live) Chat Completions and Messages calls are answered too."""

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servers import LocalServer, Reply, Request, anthropic_body, openai_body

# What becomes of one request: text to answer with, or ("error", status or error type), or "expired".
Outcome = str | tuple[str, Any]


def default_answer(custom_id: str, body: dict[str, Any]) -> Outcome:
    return "[[ANSWER]]\nok"


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


def _multipart_file(request: Request) -> bytes:
    boundary = re.search(r"boundary=(\S+)", request.headers["content-type"]).group(1).strip('"').encode()
    for part in request.body.split(b"--" + boundary):
        head, _, content = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return content[: -2] if content.endswith(b"\r\n") else content
    raise ValueError("no file part")


class BatchServer(LocalServer):
    """`polls`: looks at a batch before it ends; `answer(custom_id, body)`: each request's fate;
    `expire_batches`: every batch expires instead of completing (its unprocessed requests with it)."""

    def __init__(self, polls: int = 1, answer: Callable[[str, dict[str, Any]], Outcome] = default_answer,
                 expire_first: int = 0) -> None:
        super().__init__(self.route)
        self.polls = polls
        self.answer = answer
        self.expire_first = expire_first  # the first N batches expire before they reach any request
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, Batch] = {}
        self.submitted: list[dict[str, Any]] = []  # every request body ever submitted in a batch
        self.cancels = 0
        self.state_lock = threading.Lock()

    # -- routing ---------------------------------------------------------------------------

    def route(self, request: Request) -> Reply:
        path = request.path.split("?")[0]
        if path.startswith("/openai/"):  # Azure: the same API under /openai, api-version in the query
            assert "api-version=" in request.path, request.path
            path = "/v1/" + path[len("/openai/"):]
        with self.state_lock:
            if path == "/v1/files" and request.method == "POST":
                return self._upload(request)
            if path == "/v1/batches" and request.method == "POST":
                return self._create_openai(request)
            if path == "/v1/messages/batches" and request.method == "POST":
                return self._create_anthropic(request)
            match = re.fullmatch(r"/v1/(?:messages/)?batches/([^/]+)(/cancel|/results)?", path)
            if match:
                batch = self.batches[match.group(1)]
                if match.group(2) == "/cancel":
                    self.cancels += 1
                    batch.cancelled = True
                    return self._json(self._view(batch))
                if match.group(2) == "/results":
                    return Reply(body=batch.results, content_type="application/binary")
                self._poll(batch)
                return self._json(self._view(batch))
            match = re.fullmatch(r"/v1/files/([^/]+)/content", path)
            if match:
                return Reply(body=self.files[match.group(1)], content_type="application/octet-stream")
        return Reply("[[ANSWER]]\nlive")  # a live call: rendered in the API's own format

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
        return self._json(self._view(self._new("openai", requests)))

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
            line, is_error = (self._openai_line if batch.api == "openai" else self._anthropic_line)(custom_id, body, fate)
            if line is not None:
                (error_lines if is_error else ok_lines).append(line)
        batch.results = b"".join(json.dumps(line).encode() + b"\n" for line in ok_lines + (
            error_lines if batch.api == "anthropic" else []))
        batch.errors = b"".join(json.dumps(line).encode() + b"\n" for line in error_lines)
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
            "input_file_id": "file-x", "completion_window": "24h", "status": status,
            "output_file_id": f"{batch.id}-output" if f"{batch.id}-output" in self.files else None,
            "error_file_id": f"{batch.id}-errors" if f"{batch.id}-errors" in self.files else None,
            "created_at": int(batch.created), "request_counts": {
                "total": total, "completed": (total - failed) if ended else 0, "failed": failed},
            "metadata": None,
        }

    def _anthropic_view(self, batch: Batch) -> dict[str, Any]:
        ended = batch.status == "ended"
        counts = {"processing": 0 if ended else len(batch.requests), "succeeded": 0, "errored": 0, "canceled": 0,
                  "expired": 0}
        if ended:
            for line in batch.results.splitlines():
                kind = json.loads(line)["result"]["type"]
                counts[{"succeeded": "succeeded", "errored": "errored", "canceled": "canceled",
                        "expired": "expired"}[kind]] += 1
        return {
            "id": batch.id, "type": "message_batch",
            "processing_status": "canceling" if batch.cancelled and not ended else batch.status,
            "request_counts": counts, "ended_at": "2026-11-30T00:00:00Z" if ended else None,
            "created_at": "2026-11-30T00:00:00Z", "expires_at": "2026-12-01T00:00:00Z",
            "archived_at": None, "cancel_initiated_at": None,
            "results_url": f"{self.url}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

"""The demo server's OpenAI Batch API: files upload, batch create / list / retrieve / cancel and
the output file, answered by the same SIMULATED model as live calls, so `probe demo --batch` (and
`probe run --batch` against `probe demo-server`) takes the batch path offline.

A batch is answered when it is created and reported `in_progress` until it has been looked at
once, so a run sees one wait as it would at a provider (minutes to hours there, a poll here)."""

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (request body, its messages) -> (reply bytes, content type): the live reply, reused.
Reply = Callable[[dict[str, Any], list[dict[str, Any]]], tuple[bytes, str]]

ROUTES = (
    ("POST", re.compile(r"/v1/files"), "upload"),
    ("GET", re.compile(r"/v1/files/([^/]+)/content"), "content"),
    ("POST", re.compile(r"/v1/batches"), "create"),
    ("GET", re.compile(r"/v1/batches"), "list"),
    ("GET", re.compile(r"/v1/batches/([^/]+)"), "retrieve"),
    ("POST", re.compile(r"/v1/batches/([^/]+)/cancel"), "cancel"),
)


class BatchRequestError(Exception):
    """A request the batch API refuses: (HTTP status, message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class DemoBatch:
    id: str
    input_file_id: str
    output_file_id: str | None
    error_file_id: str | None
    total: int
    failed: int
    created_at: int
    looked_at: bool = False
    cancelled: bool = False
    metadata: dict[str, Any] | None = None

    def view(self) -> dict[str, Any]:
        done = self.looked_at or self.cancelled
        status = ("cancelled" if self.cancelled else "completed") if done else "in_progress"
        finished = done and not self.cancelled
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": self.output_file_id if finished else None,
            "error_file_id": self.error_file_id if finished else None,
            "created_at": self.created_at,
            "request_counts": {
                "total": self.total,
                "completed": self.total - self.failed if finished else 0,
                "failed": self.failed if finished else 0,
            },
            "metadata": self.metadata,
        }


class DemoBatches:
    """The files and batches one demo server holds (in memory: the demo is a throwaway target)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, DemoBatch] = {}
        self.lock = threading.Lock()

    def route(self, method: str, path: str) -> tuple[str, tuple[str, ...]] | None:
        """(handler name, path arguments) for a batch API path, or None when it is not one."""
        for route_method, pattern, name in ROUTES:
            match = pattern.fullmatch(path)
            if match and method == route_method:
                return name, match.groups()
        return None

    def handle(self, name: str, args: tuple[str, ...], headers: Any, body: bytes) -> tuple[bytes, str]:
        """(body, content type) of a 200 reply; BatchRequestError for anything else."""
        with self.lock:
            if name == "upload":
                return _json(self._upload(headers.get("content-type", ""), body))
            if name == "content":
                return self._file(args[0]), "application/octet-stream"
            if name == "create":
                return _json(self._create(_object(body)))
            if name == "list":  # newest first, all on one page (a demo holds a few batches)
                views = [b.view() for b in reversed(self.batches.values())]
                return _json({"object": "list", "data": views, "has_more": False})
            batch = self.batches.get(args[0])
            if batch is None:
                raise BatchRequestError(404, f"no batch {args[0]}")
            if name == "cancel":
                batch.cancelled = not batch.looked_at
            else:
                view = batch.view()
                batch.looked_at = True
                return _json(view)
            return _json(batch.view())

    def _upload(self, content_type: str, body: bytes) -> dict[str, Any]:
        data = _multipart_file(content_type, body)
        file_id = f"file-demo{len(self.files) + 1:04d}"
        self.files[file_id] = data
        return {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": "input.jsonl",
            "purpose": "batch",
            "status": "processed",
        }

    def _file(self, file_id: str) -> bytes:
        if file_id not in self.files:
            raise BatchRequestError(404, f"no file {file_id}")
        return self.files[file_id]

    def _create(self, request: dict[str, Any]) -> dict[str, Any]:
        input_file_id = request.get("input_file_id")
        if not isinstance(input_file_id, str) or input_file_id not in self.files:
            raise BatchRequestError(400, f"no input file {input_file_id!r}")
        if request.get("endpoint") != "/v1/chat/completions":
            raise BatchRequestError(400, "the demo's batches serve /v1/chat/completions only")
        batch_id = f"batch_demo{len(self.batches) + 1:04d}"
        answered, failed = [], []
        for number, line in enumerate(self.files[input_file_id].splitlines(), 1):
            if line.strip():
                target = answered
                try:
                    result = self._answer(json.loads(line))
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    target = failed
                    result = {
                        "id": f"batch_req_{batch_id}_{number}",
                        "custom_id": _custom_id(line),
                        "response": None,
                        "error": {"code": "invalid_request", "message": f"line {number}: {exc}"},
                    }
                target.append(json.dumps(result, ensure_ascii=False).encode("utf-8") + b"\n")
        output_file_id = error_file_id = None
        if answered:
            output_file_id = f"file-{batch_id}-output"
            self.files[output_file_id] = b"".join(answered)
        if failed:
            error_file_id = f"file-{batch_id}-errors"
            self.files[error_file_id] = b"".join(failed)
        batch = DemoBatch(
            batch_id,
            input_file_id,
            output_file_id,
            error_file_id,
            len(answered) + len(failed),
            len(failed),
            int(time.time()),
        )
        metadata = request.get("metadata")
        batch.metadata = metadata if isinstance(metadata, dict) else None
        self.batches[batch_id] = batch
        return batch.view()

    def _answer(self, line: dict[str, Any]) -> dict[str, Any]:
        body = line["body"]
        reply, _ = self.reply({**body, "stream": False}, body["messages"])
        custom_id = line["custom_id"]
        return {
            "id": f"batch_req_{custom_id}",
            "custom_id": custom_id,
            "response": {"status_code": 200, "request_id": f"req_{custom_id}", "body": json.loads(reply)},
            "error": None,
        }


def _json(value: Any) -> tuple[bytes, str]:
    return json.dumps(value).encode(), "application/json"


def _object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError:
        raise BatchRequestError(400, "body must be JSON") from None
    if not isinstance(value, dict):
        raise BatchRequestError(400, "body must be a JSON object")
    return value


def _custom_id(line: bytes) -> str | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value.get("custom_id") if isinstance(value, dict) else None


def _multipart_file(content_type: str, body: bytes) -> bytes:
    """The `file` part of a multipart/form-data upload."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        raise BatchRequestError(400, "upload a file as multipart/form-data")
    for part in body.split(b"--" + match.group(1).encode()):
        head, _, content = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return content[:-2] if content.endswith(b"\r\n") else content
    raise BatchRequestError(400, "the upload has no 'file' part")

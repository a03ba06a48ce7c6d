"""Local HTTP servers for the tests: the Anthropic Messages API, OpenAI Chat Completions and a
retrieval endpoint, speaking the real wire formats over real sockets.

A test scripts replies with a `responder(request) -> Reply`; every request is recorded.
"""

import json
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    text: str | None = None  # the model's output; None with a raw status reply
    status: int = 200
    body: bytes | None = None  # a raw body, sent as is
    headers: dict[str, str] = field(default_factory=dict)
    stop: str | None = None
    delay: float = 0.0  # before anything is sent (a hang when long)
    trickle: float = 0.0  # seconds between bytes of the body (a stream trickling)
    cut: int | None = None  # send only the first `cut` bytes of the body, then close
    reset: bool = False  # with `cut`: close with a TCP reset instead of a clean close
    content_type: str | None = None
    model: str | None = None  # the model field as reported (default: the model asked for, dated)


Responder = Callable[[Request], Reply]


def anthropic_body(text: str, model: str, stop: str | None, reported: str | None = None) -> bytes:
    message = {
        "id": "msg_test01",
        "type": "message",
        "role": "assistant",
        "model": reported or f"{model}-20990101",
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop or "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 17},
    }
    return json.dumps(message, ensure_ascii=False).encode()


def openai_body(text: str, model: str, stop: str | None, reported: str | None = None) -> bytes:
    completion = {
        "id": "chatcmpl-test01",
        "object": "chat.completion",
        "created": 1_764_000_000,
        "model": reported or f"{model}-2099-01-01",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": stop or "stop",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137},
    }
    return json.dumps(completion, ensure_ascii=False).encode()


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def anthropic_stream(text: str, model: str, stop: str | None, reported: str | None = None) -> bytes:
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_test01", "type": "message", "role": "assistant",
            "model": reported or f"{model}-20990101", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 120, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
    ]
    for piece in pieces(text):
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": piece}}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": stop or "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 17}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return sse(events)


def openai_stream(text: str, model: str, stop: str | None, reported: str | None = None) -> bytes:
    def chunk(delta: dict, finish: str | None, usage: dict | None = None) -> dict:
        return {"id": "chatcmpl-test01", "object": "chat.completion.chunk",
                "created": 1_764_000_000, "model": reported or f"{model}-2099-01-01",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
                if usage is None else [], "usage": usage}

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}, None))]
    events += [(None, chunk({"content": piece}, None)) for piece in pieces(text)]
    events.append((None, chunk({}, stop or "stop")))
    events.append((None, chunk({}, None, {"prompt_tokens": 120, "completion_tokens": 17,
                                          "total_tokens": 137})))
    events.append((None, "[DONE]"))
    return sse(events)


class LocalServer:
    """A threaded HTTP server on 127.0.0.1 with a scripted responder per API."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder = responder or (lambda request: Reply("[[ANSWER]]\nok"))
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()  # ends hangs and trickles when the test is done
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body in separate writes: no delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                """Keep test output quiet."""

            def _handle(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                  self.rfile.read(length))
                with server.lock:
                    server.requests.append(request)
                reply = server.responder(request)
                if reply.delay and server.stopping.wait(reply.delay):
                    return
                body, content_type = server.render(request, reply)
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type or content_type)
                self.send_header("content-length", str(len(body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                # One request per connection, so a stopped server is really gone.
                self.send_header("connection", "close")
                self.close_connection = True
                self.end_headers()
                if reply.cut is not None:
                    self.wfile.write(body[: reply.cut])
                    self.wfile.flush()
                    if reply.reset:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    return
                if reply.trickle:
                    for index in range(len(body)):
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                        if server.stopping.wait(reply.trickle):
                            return
                    return
                self.wfile.write(body)

            do_POST = _handle
            do_GET = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def render(self, request: Request, reply: Reply) -> tuple[bytes, str]:
        if reply.body is not None or reply.text is None:
            return reply.body or b"", "application/json"
        payload = request.json
        path = request.path.split("?")[0]
        # Bedrock and Vertex name the model in the path; their bodies are the Messages API's.
        model = payload.get("model") or path.rsplit("/", 2)[-2 if path.endswith("/invoke") else -1].split(":")[0]
        stream = payload.get("stream", False)
        if path.endswith(("/messages", "/invoke", ":rawPredict")):
            reply.headers.setdefault("request-id", "req_test_anthropic")
            if stream:
                return anthropic_stream(reply.text, model, reply.stop, reply.model), "text/event-stream"
            return anthropic_body(reply.text, model, reply.stop, reply.model), "application/json"
        reply.headers.setdefault("x-request-id", "req_test_openai")
        if stream:
            return openai_stream(reply.text, model, reply.stop, reply.model), "text/event-stream"
        return openai_body(reply.text, model, reply.stop, reply.model), "application/json"

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "LocalServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class RawServer:
    """A server on raw sockets for faults an HTTP library would not send: `handler(conn, request)`
    writes whatever it likes (headers a byte at a time, a body that never ends) and returns."""

    def __init__(self, handler: Callable[[socket.socket, bytes], None]) -> None:
        self.handler = handler
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            self.handler(conn, head + b"\r\n\r\n" + body)
        except OSError:
            return  # the client gave up: what the fault was for
        finally:
            conn.close()

    def trickle(self, conn: socket.socket, data: bytes, every: float) -> None:
        """Send `data` one byte at a time, `every` seconds apart, until done or stopped."""
        for index in range(len(data)):
            conn.sendall(data[index : index + 1])
            if self.stopping.wait(every):
                return

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "RawServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.sock.close()


def http_response(body: bytes, status: str = "200 OK", content_type: str = "application/json",
                  headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"content-type: {content_type}", f"content-length: {len(body)}",
             "connection: close", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# -- a server that echoes the key ------------------------------------------------------------------


def key_of(request: Request) -> str:
    """The key a request carried (OpenAI's bearer token, Anthropic's x-api-key)."""
    bearer = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or bearer.removeprefix("Bearer ").strip()


def mime_base64(data: bytes, column: int = 76) -> str:
    """Base64 broken into lines of `column` characters (MIME), CRLF between them."""
    import base64

    text = base64.b64encode(data).decode("ascii")
    return "\r\n".join(text[i : i + column] for i in range(0, len(text), column))


def secret_forms(key: str) -> dict[str, str]:
    """The encoded forms a hostile server may echo a key in (issue 25): every character
    \\u-escaped (either case), only the punctuation \\u-escaped, every byte percent-encoded (either
    case), and MIME-style base64 with the key at several alignments in the stream, so that the
    line break falls at different places inside it (and the key's bytes at each of the three
    offsets a base64 group can give them); since issue 37 also hex (either case, and broken by a
    line break), upper-cased, reversed, and split by one line break (LF or CRLF)."""
    forms = {
        "every character \\u-escaped": "".join(f"\\u{ord(c):04x}" for c in key),
        "every character \\u-escaped (upper-case hex)": "".join(f"\\u{ord(c):04X}" for c in key),
        "only the punctuation \\u-escaped": "".join(c if c.isalnum() else f"\\u{ord(c):04x}" for c in key),
        "every byte percent-encoded": "".join(f"%{b:02X}" for b in key.encode()),
        "every byte percent-encoded (lower case)": "".join(f"%{b:02x}" for b in key.encode()),
    }
    hexed = key.encode().hex()
    forms.update({  # issue 37: the forms an audit found kept
        "hex (lower case)": hexed,
        "hex (upper case)": hexed.upper(),
        "hex broken by a line break": hexed[:21] + "\n" + hexed[21:],
        "upper-cased": key.upper(),
        "reversed": key[::-1],
        "split by one newline": key[:9] + "\n" + key[9:],
        "split by CRLF": key[:17] + "\r\n" + key[17:],
    })
    for prefix in (24, 40, 41, 42, 54, 55, 56):  # the 76-column break falls inside the key
        forms[f"MIME base64, {prefix} bytes before the key"] = mime_base64(
            b"Authorization-echo: " + b"x" * (prefix - 20) + key.encode() + b" (end)"
        )
    return forms

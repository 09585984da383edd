"""A stand-in HTTP server on a free loopback port, for tests of clients (the OpenAI-compatible one)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that answers with ``send_text`` and logs nothing."""

    def send_text(self, status: int, text: str, content_type: str | None = None) -> None:
        """One response; a client that stopped waiting (a timeout test) is not an error."""
        data = text.encode()
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except BrokenPipeError:
            pass

    def log_message(self, *args):
        pass


@contextmanager
def running_server(handler: type[QuietHandler]) -> Iterator[ThreadingHTTPServer]:
    """``handler`` served on 127.0.0.1 (a free port) in a daemon thread, stopped afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving_app(app) -> Iterator[str]:
    """An ASGI ``app`` (a real server of ours) under uvicorn in a thread on a free loopback
    port; its base URL."""
    import socket
    import time

    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start within 15 s"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)

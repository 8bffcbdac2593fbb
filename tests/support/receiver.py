"""A real HTTP receiver of webhooks for tests: a server thread on
127.0.0.1 that answers from a script of status codes and, like a careful
consumer, acts once per `webhook-id` however often it is delivered."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    def __init__(self, statuses=(), default=200, hold_first: threading.Event | None = None, on_arrival=None):
        """`on_arrival(body)`, if given, runs in the server's thread as each
        request arrives, before it is answered: what a test records there
        is what held at the moment of delivery."""
        self.statuses = list(statuses)
        self.default = default
        self.hold_first = hold_first
        self.requests: list[dict] = []
        self.processed: dict[str, dict] = {}
        self.arrived = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if on_arrival is not None:
                    on_arrival(json.loads(body))
                with receiver.lock:
                    number = len(receiver.requests)
                    receiver.requests.append(
                        {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                    )
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.default
                receiver.arrived.set()
                if number == 0 and receiver.hold_first is not None:
                    receiver.hold_first.wait(60)
                    return
                if 200 <= status < 300:
                    with receiver.lock:
                        receiver.processed.setdefault(self.headers["webhook-id"], json.loads(body))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/redirected")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.hold_first is not None:
            self.hold_first.set()
        self.server.shutdown()
        self.server.server_close()

#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver on 127.0.0.1 for the tests: decodes what Herald exports with the
`opentelemetry-proto` package (the collector's own protobuf definitions) and keeps the spans.

Started as `python3 otlp_receiver.py [--port N] [--exit-on-stdin-eof] [--discard]` (default port 0, any
free one). Prints one line `PORT <n>` once listening and serves until SIGTERM/SIGINT (or stdin's end, if
asked). With `--discard` (for `make bench`), an export is read and answered 200 but neither decoded nor
kept: the collector costs the traced server's machine as little as it can.

  POST /v1/traces          an ExportTraceServiceRequest (`application/x-protobuf`): answered as the mode
                           says. "ok" (the default): its spans are kept, 200 with an empty
                           ExportTraceServiceResponse. "refuse": 400, nothing kept. "stall": never
                           answered (until the client closes the connection or the server stops).
  POST /_control/mode      {"mode": "ok" | "refuse" | "stall"}; 204.
  GET  /_control/spans?min=N&timeout=S
                           waits until at least N spans are kept or S seconds pass (defaults 0 and 10),
                           then 200 with the JSON list of every span in arrival order:
                           {"trace_id", "span_id", "parent_span_id" (hex, "" for a root), "name", "kind"
                           (SPAN_KIND_SERVER, ...), "attributes": {key: value}, "links": [{"trace_id",
                           "span_id"}], "status": STATUS_CODE_..., "resource": {key: value},
                           "start_ns", "end_ns"}.
  GET  /_control/exports   {"requests": n, "bytes": n, "content_types": [...]}: every POST /v1/traces
                           seen (no content types with --discard).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_lock = threading.Lock()
_changed = threading.Condition(_lock)
_spans = []
_mode = "ok"
_requests = 0
_bytes = 0
_content_types = []
_stopping = threading.Event()
_discard = False


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(item) for item in any_value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _value(item.value) for item in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def _attributes(key_values):
    return {item.key: _value(item.value) for item in key_values}


def _flatten(request):
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append({
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": Span.SpanKind.Name(span.kind),
                    "attributes": _attributes(span.attributes),
                    "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links],
                    "status": Status.StatusCode.Name(span.status.code),
                    "resource": resource,
                    "start_ns": span.start_time_unix_nano,
                    "end_ns": span.end_time_unix_nano,
                })
    return spans


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status, body=b"", content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        global _mode, _requests, _bytes
        path = urlsplit(self.path).path
        body = self._body()
        if path == "/_control/mode":
            mode = json.loads(body)["mode"]
            with _lock:
                _mode = mode
            self._answer(204)
            return
        if path != "/v1/traces":
            self._answer(404, b"{}")
            return
        with _lock:
            mode = _mode
            _requests += 1
            _bytes += len(body)
            if not _discard:
                _content_types.append(self.headers.get("Content-Type"))
        if mode == "stall":
            # Never answered: held until the client gives up (its connection closes) or the server stops.
            self.connection.settimeout(0.2)
            while not _stopping.is_set():
                try:
                    if self.connection.recv(1) == b"":
                        return
                except TimeoutError:
                    continue
                except OSError:
                    return
            return
        if mode == "refuse":
            self._answer(400, b"refused", "text/plain")
            return
        if _discard:
            self._answer(200, b"", "application/x-protobuf")
            return
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = _flatten(request)
        with _changed:
            _spans.extend(spans)
            _changed.notify_all()
        self._answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        if url.path == "/_control/spans":
            wanted = int(query.get("min", ["0"])[0])
            deadline = time.monotonic() + float(query.get("timeout", ["10"])[0])
            with _changed:
                while len(_spans) < wanted and time.monotonic() < deadline:
                    _changed.wait(timeout=max(0.0, deadline - time.monotonic()))
                body = json.dumps(_spans).encode()
            self._answer(200, body)
            return
        if url.path == "/_control/exports":
            with _lock:
                body = json.dumps({"requests": _requests, "bytes": _bytes, "content_types": _content_types}).encode()
            self._answer(200, body)
            return
        self._answer(404, b"{}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    parser.add_argument("--discard", action="store_true")
    arguments = parser.parse_args()
    global _discard
    _discard = arguments.discard
    server = ThreadingHTTPServer(("127.0.0.1", arguments.port), Handler)
    server.daemon_threads = True

    def stop(*_):
        _stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if arguments.exit_on_stdin_eof:
        def watch():
            while os.read(0, 4096):
                pass
            stop()
        threading.Thread(target=watch, daemon=True).start()
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())

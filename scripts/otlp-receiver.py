#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for the tests: it stands in for a collector, decodes each export with
opentelemetry-proto, and appends one JSON line per span to a file.

Usage: otlp-receiver.py PORT OUT.jsonl   (PORT 0 picks a free one; the port is printed on the first line)
"""
import gzip
import json
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse

lock = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(item) for item in any_value.array_value.values]
    if kind == "kvlist_value":
        return {pair.key: value(pair.value) for pair in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    out = None

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        encoding = (self.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        if self.path.rstrip("/") != "/v1/traces":
            return self.reply(404, b"", "text/plain")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/x-protobuf":
            return self.reply(415, b"only application/x-protobuf", "text/plain")
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as error:  # a malformed export is the exporter's bug: say so
            return self.reply(400, str(error).encode(), "text/plain")
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "name": span.name, "kind": span.kind,
                        "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "status_code": span.status.code,
                        "attributes": attributes(span.attributes),
                        "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links],
                        "events": [{"name": event.name, "attributes": attributes(event.attributes)} for event in span.events],
                        "resource": resource,
                    }, sort_keys=True))
        with lock:
            for line in lines:
                self.out.write(line + "\n")
            self.out.flush()
        self.reply(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def reply(self, code, payload, content_type):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def main():
    port, path = int(sys.argv[1]), sys.argv[2]
    Handler.out = open(path, "a", buffering=1)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

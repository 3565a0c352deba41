#!/usr/bin/python3
"""An S3 server for tests that can be told to misbehave.

Honest, it keeps objects in memory and answers the requests the s3:// backend
sends (path-style addressing; signatures are not checked): PUT (with
If-None-Match: *), GET (ranges, If-Match), HEAD, DELETE, ListObjectsV2 (prefix,
delimiter, continuation tokens, max-keys), DeleteObjects, and multipart
uploads (initiate, parts, complete, abort, list).

Told to misbehave, through POST /__hostile__ with lines "name=value" (an
empty value turns a fault off), it can:
  ignore_prefix=1     list every key of the bucket, whatever prefix and
                      delimiter were asked for (a proxy that drops them);
                      =undelimited: only in listings without a delimiter
  foreign=K1,K2       add these keys to every listing (not stored)
  missing=REGEX       answer 404 NoSuchKey to GET and HEAD of matching keys,
                      while listings still name them (a lagging replica)
  fail=REGEX          answer 503 SlowDown to GET and HEAD of matching keys
  silent=1            accept each request and never answer it
  trickle=1           answer GETs with one byte a second
  endless_pages=1     every listing page says it is truncated, with a new
                      continuation token, forever
GET /__hostile__ answers how many S3 requests were served, a line "METHOD N"
for each method; GET /__hostile__/keys/BUCKET every key stored in BUCKET, one
a line.

Usage: hostile_s3.py PORT_FILE   listens on a free loopback port, writes it
to PORT_FILE, and serves until killed or until the process that started it
ends.
"""

import hashlib
import html
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

LOCK = threading.Lock()
BUCKETS = {}  # bucket -> {key: bytes}
UPLOADS = {}  # upload id -> (bucket, key, {part number: bytes}, initiated)
FAULTS = {}
COUNTS = {}
NEXT_ID = [0]


def fault(name):
    with LOCK:
        return FAULTS.get(name, "")


def matches(name, key):
    pattern = fault(name)
    return bool(pattern) and re.search(pattern, key) is not None


def etag(data):
    return '"' + hashlib.md5(data).hexdigest() + '"'


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    # --- plumbing ---
    def body(self):
        n = int(self.headers.get("content-length") or 0)
        return self.rfile.read(n) if n else b""

    def answer(self, status, body=b"", headers=None, head=False):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def error(self, status, code, message="", head=False):
        xml = "<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>%s</Message><RequestId>hostile</RequestId></Error>" % (
            code, escape(message))
        self.answer(status, xml, {"content-type": "application/xml"}, head)

    def split(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        parts = url.path.lstrip("/").split("/", 1)
        bucket = urllib.parse.unquote(parts[0])
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        return bucket, key, query

    def count(self):
        with LOCK:
            COUNTS[self.command] = COUNTS.get(self.command, 0) + 1

    def stall(self):
        if fault("silent"):
            # Never answer; end when the client gives up (or after 10 minutes).
            self.connection.settimeout(1)
            until = time.time() + 600
            while time.time() < until:
                try:
                    if self.connection.recv(1, 0x40) == b"":  # MSG_DONTWAIT
                        break
                except (BlockingIOError, TimeoutError, OSError):
                    pass
                time.sleep(0.2)
            self.close_connection = True
            return True
        return False

    # --- control ---
    def control(self):
        if self.command == "POST":
            with LOCK:
                for line in self.body().decode().splitlines():
                    if "=" in line:
                        k, v = line.split("=", 1)
                        if v:
                            FAULTS[k.strip()] = v.strip()
                        else:
                            FAULTS.pop(k.strip(), None)
            self.answer(200, "ok")
        elif self.path.startswith("/__hostile__/keys/"):
            bucket = urllib.parse.unquote(self.path[len("/__hostile__/keys/"):])
            with LOCK:
                keys = sorted(BUCKETS.get(bucket, {}).keys())
            self.answer(200, "".join(k + "\n" for k in keys))
        else:
            with LOCK:
                counts = sorted(COUNTS.items())
            self.answer(200, "".join("%s %d\n" % c for c in counts))

    # --- S3 ---
    def do_GET(self):
        self.dispatch()

    def do_HEAD(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def dispatch(self):
        if self.path.startswith("/__hostile__"):
            return self.control()
        self.count()
        if self.stall():
            return
        bucket, key, q = self.split()
        m = self.command
        if not key:
            if m == "GET" and "uploads" in q:
                return self.list_uploads(bucket, q)
            if m == "GET":
                return self.list_objects(bucket, q)
            if m == "POST" and "delete" in q:
                return self.delete_objects(bucket)
            if m in ("PUT", "HEAD"):
                with LOCK:
                    BUCKETS.setdefault(bucket, {})
                return self.answer(200, head=m == "HEAD")
            return self.error(400, "InvalidRequest", "not supported here")
        if m == "POST" and "uploads" in q:
            with LOCK:
                NEXT_ID[0] += 1
                uid = "upload-%d" % NEXT_ID[0]
                UPLOADS[uid] = (bucket, key, {}, time.time())
            return self.answer(200, "<InitiateMultipartUploadResult><Bucket>%s</Bucket><Key>%s</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>" % (
                escape(bucket), escape(key), uid))
        if m == "PUT" and "uploadId" in q:
            data = self.body()
            with LOCK:
                up = UPLOADS.get(q["uploadId"])
                if up is None:
                    return self.error(404, "NoSuchUpload")
                up[2][int(q["partNumber"])] = data
            return self.answer(200, headers={"etag": etag(data)})
        if m == "POST" and "uploadId" in q:
            self.body()
            with LOCK:
                up = UPLOADS.pop(q["uploadId"], None)
                if up is None:
                    return self.error(404, "NoSuchUpload")
                data = b"".join(up[2][n] for n in sorted(up[2]))
                BUCKETS.setdefault(bucket, {})[key] = data
            return self.answer(200, "<CompleteMultipartUploadResult><ETag>%s</ETag></CompleteMultipartUploadResult>" % escape(etag(data)))
        if m == "DELETE" and "uploadId" in q:
            with LOCK:
                gone = UPLOADS.pop(q["uploadId"], None)
            return self.answer(204) if gone else self.error(404, "NoSuchUpload")
        if m == "PUT":
            data = self.body()
            with LOCK:
                objects = BUCKETS.setdefault(bucket, {})
                if self.headers.get("if-none-match") == "*" and key in objects:
                    return self.error(412, "PreconditionFailed", "the key exists")
                objects[key] = data
            return self.answer(200, headers={"etag": etag(data)})
        if m == "DELETE":
            with LOCK:
                BUCKETS.get(bucket, {}).pop(key, None)
            return self.answer(204)
        if m in ("GET", "HEAD"):
            return self.get(bucket, key, m == "HEAD")
        return self.error(400, "InvalidRequest", "not supported here")

    def get(self, bucket, key, head):
        if matches("missing", key):
            return self.error(404, "NoSuchKey", key, head)
        if matches("fail", key):
            return self.error(503, "SlowDown", "told to fail", head)
        with LOCK:
            data = BUCKETS.get(bucket, {}).get(key)
        if data is None:
            return self.error(404, "NoSuchKey", key, head)
        tag = etag(data)
        want = self.headers.get("if-match")
        if want and want != tag:
            return self.error(412, "PreconditionFailed", "etag", head)
        status, lo, hi = 200, 0, len(data)
        rng = self.headers.get("range")
        if rng and rng.startswith("bytes="):
            a, b = rng[6:].split("-", 1)
            if a == "":
                lo = max(0, len(data) - int(b))
            else:
                lo, hi = int(a), min(len(data), int(b) + 1 if b else len(data))
            status = 206
        piece = data[lo:hi]
        headers = {"etag": tag, "last-modified": "Sun, 06 Dec 2026 00:00:00 GMT"}
        if status == 206:
            headers["content-range"] = "bytes %d-%d/%d" % (lo, hi - 1, len(data))
        if head:
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            return
        if fault("trickle"):
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(piece)))
            self.end_headers()
            for i in range(len(piece)):
                try:
                    self.wfile.write(piece[i:i + 1])
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(1)
            return
        self.answer(status, piece, headers)

    def list_objects(self, bucket, q):
        prefix = q.get("prefix", "")
        delimiter = q.get("delimiter", "")
        max_keys = int(q.get("max-keys", "1000"))
        token = q.get("continuation-token", "")
        with LOCK:
            keys = sorted(BUCKETS.get(bucket, {}).keys())
            sizes = {k: len(v) for k, v in BUCKETS.get(bucket, {}).items()}
        foreign = [k for k in fault("foreign").split(",") if k]
        ignore = fault("ignore_prefix")
        if ignore == "1" or (ignore == "undelimited" and not delimiter):
            prefix, delimiter = "", ""
        keys = sorted(set([k for k in keys if k.startswith(prefix)] + foreign))
        if fault("endless_pages"):
            n = int(token.split("-")[1]) + 1 if token.startswith("endless-") else 1
            xml = ("<ListBucketResult><Name>%s</Name><Prefix>%s</Prefix><KeyCount>0</KeyCount>"
                   "<IsTruncated>true</IsTruncated><NextContinuationToken>endless-%d</NextContinuationToken>"
                   "</ListBucketResult>") % (escape(bucket), escape(prefix), n)
            return self.answer(200, xml, {"content-type": "application/xml"})
        entries = []  # (name, is_prefix)
        seen = set()
        for k in keys:
            if delimiter and k.startswith(prefix):
                rest = k[len(prefix):]
                cut = rest.find(delimiter)
                if cut >= 0:
                    p = prefix + rest[:cut + len(delimiter)]
                    if p not in seen:
                        seen.add(p)
                        entries.append((p, True))
                    continue
            entries.append((k, False))
        if token:
            entries = [e for e in entries if e[0] > token]
        page, rest = entries[:max_keys], entries[max_keys:]
        out = ["<ListBucketResult><Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><IsTruncated>%s</IsTruncated>" % (
            escape(bucket), escape(prefix), len(page), "true" if rest else "false")]
        if rest:
            out.append("<NextContinuationToken>%s</NextContinuationToken>" % escape(page[-1][0]))
        for name, is_prefix in page:
            if is_prefix:
                out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % escape(name))
            else:
                out.append("<Contents><Key>%s</Key><Size>%d</Size><ETag>&quot;x&quot;</ETag>"
                           "<LastModified>2026-12-06T00:00:00.000Z</LastModified></Contents>" % (
                               escape(name), sizes.get(name, 0)))
        out.append("</ListBucketResult>")
        self.answer(200, "".join(out), {"content-type": "application/xml"})

    def list_uploads(self, bucket, q):
        prefix = q.get("prefix", "")
        with LOCK:
            ups = [(k, uid, t) for uid, (b, k, _, t) in UPLOADS.items() if b == bucket and k.startswith(prefix)]
        out = ["<ListMultipartUploadsResult><Bucket>%s</Bucket><IsTruncated>false</IsTruncated>" % escape(bucket)]
        for k, uid, t in sorted(ups):
            out.append("<Upload><Key>%s</Key><UploadId>%s</UploadId><Initiated>%s</Initiated></Upload>" % (
                escape(k), uid, iso(t)))
        out.append("</ListMultipartUploadsResult>")
        self.answer(200, "".join(out), {"content-type": "application/xml"})

    def delete_objects(self, bucket):
        xml = self.body().decode()
        keys = [html.unescape(k) for k in re.findall(r"<Key>(.*?)</Key>", xml, re.S)]
        with LOCK:
            objects = BUCKETS.setdefault(bucket, {})
            for k in keys:
                objects.pop(k, None)
        self.answer(200, "<DeleteResult></DeleteResult>", {"content-type": "application/xml"})


def watch_parent(parent):
    # The test that started this server may be killed: go with it.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main():
    threading.Thread(target=watch_parent, args=(os.getppid(),), daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()


if __name__ == "__main__":
    main()

"""The S3 command-line clients users would reach for, timed on the same bytes
ckpt moves through s3://: `aws s3 cp` (Debian's AWS CLI, its multipart
defaults) and `s3cmd put/get`, up and down, against the suite's S3 server.
One operation per process; prints one JSON line with its seconds and bytes.

    python3 s3_clients.py aws-put --file F --url s3://bucket/key --endpoint http://127.0.0.1:PORT
    python3 s3_clients.py aws-get --file F --url ... | s3cmd-put ... | s3cmd-get ...

Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time


def s3cmd_config(endpoint):
    host = endpoint.split("://", 1)[1]
    text = "\n".join([
        "[default]",
        f"access_key = {os.environ['AWS_ACCESS_KEY_ID']}",
        f"secret_key = {os.environ['AWS_SECRET_ACCESS_KEY']}",
        f"host_base = {host}",
        f"host_bucket = {host}",
        f"use_https = {'True' if endpoint.startswith('https') else 'False'}",
        "signature_v2 = False",
        ""])
    f = tempfile.NamedTemporaryFile("w", suffix=".s3cfg", delete=False)
    f.write(text)
    f.close()
    return f.name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["aws-put", "aws-get", "s3cmd-put", "s3cmd-get"])
    ap.add_argument("--file", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--endpoint", required=True)
    a = ap.parse_args()
    tool, op = a.what.split("-")
    cfg = None
    if tool == "aws":
        src, dst = (a.file, a.url) if op == "put" else (a.url, a.file)
        argv = ["/usr/bin/aws", "--endpoint-url", a.endpoint, "s3", "cp", "--only-show-errors", src, dst]
    else:
        cfg = s3cmd_config(a.endpoint)
        argv = ["/usr/bin/s3cmd", "-c", cfg, "--no-progress", "--quiet"]
        argv += ["put", a.file, a.url] if op == "put" else ["get", "--force", a.url, a.file]
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if cfg:
        os.remove(cfg)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    print(json.dumps({"seconds": seconds, "bytes": os.path.getsize(a.file)}), flush=True)


if __name__ == "__main__":
    main()

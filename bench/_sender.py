"""One webhook sender for ``bench_webhooks --throughput``: POSTs back to back, one fresh connection each.

Run by the benchmark, one process per sender::

    python bench/_sender.py PORT START SECONDS LABEL HEAD_FILE BODY_FILE SECRET_FILE

It waits until the Unix time START (so all senders begin together), then for
SECONDS sends ``HEAD`` (the request line and the fixed headers), then its own
``Content-Length``, ``X-GitHub-Delivery: LABEL-N`` and ``X-Hub-Signature-256``,
and ``BODY`` (a JSON object) with ``"bench_delivery": "LABEL-N"`` added: each
delivery has its own id and its own signed body, as a sender's distinct events
do (the same signed body again is a replay, answered without a write,
rfcs/0374). It reads the answer to the end (the server closes) and counts it.
Prints ``answered-200 other cpu-seconds`` (the CPU of the sending only, not of
the interpreter's start).

Plain blocking sockets in a loop: a sender costs about a third of what the
server under test spends per delivery (the table shows both), where a trio
sender in the benchmark's own process cost more than the server and set the
pace of every row.
"""

from __future__ import annotations

import hmac
import os
import socket
import sys
import time


def main(argv: list[str]) -> None:
    port, start, seconds, label = int(argv[0]), float(argv[1]), float(argv[2]), argv[3]
    with open(argv[4], "rb") as f:
        head = f.read()
    with open(argv[5], "rb") as f:
        body_open = f.read().rstrip().removesuffix(b"}")
    with open(argv[6], "rb") as f:
        secret = f.read().strip()
    address = ("127.0.0.1", port)
    prefix = label.encode() + b"-"
    ok = other = n = 0
    time.sleep(max(0.0, start - time.time()))
    began = os.times()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        delivery = prefix + str(n).encode()
        body = body_open + b',"bench_delivery":"' + delivery + b'"}'
        signature = hmac.digest(secret, body, "sha256").hex().encode()
        request = (
            head
            + b"Content-Length: %d\r\nX-GitHub-Delivery: %s\r\nX-Hub-Signature-256: sha256=%s\r\n\r\n"
            % (len(body), delivery, signature)
            + body
        )
        with socket.socket() as s:
            s.connect(address)
            s.sendall(request)
            n += 1
            answer = s.recv(65536)
            while chunk := s.recv(65536):
                answer += chunk
        if answer.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            ok += 1
        else:
            other += 1
    times = os.times()
    print(ok, other, times.user - began.user + times.system - began.system, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

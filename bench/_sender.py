"""One webhook sender for ``bench_webhooks --throughput``: POSTs back to back, one fresh connection each.

Run by the benchmark, one process per sender::

    python bench/_sender.py PORT START SECONDS LABEL HEAD_FILE TAIL_FILE

It waits until the Unix time START (so all senders begin together), then for
SECONDS sends ``HEAD + LABEL-N + TAIL`` (HEAD ends inside the delivery-id
header, TAIL holds the rest of the head and the body: each delivery has its
own id, as a sender's retries would not), reads the answer to the end (the
server closes), and counts it. Prints ``answered-200 other cpu-seconds`` (the CPU of the sending
only, not of the interpreter's start).

Plain blocking sockets in a loop: a sender costs about a third of what the
server under test spends per delivery (the table shows both), where a trio
sender in the benchmark's own process cost more than the server and set the
pace of every row.
"""

from __future__ import annotations

import os
import socket
import sys
import time


def main(argv: list[str]) -> None:
    port, start, seconds, label = int(argv[0]), float(argv[1]), float(argv[2]), argv[3]
    with open(argv[4], "rb") as f:
        head = f.read()
    with open(argv[5], "rb") as f:
        tail = f.read()
    address = ("127.0.0.1", port)
    prefix = label.encode() + b"-"
    ok = other = n = 0
    time.sleep(max(0.0, start - time.time()))
    began = os.times()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        with socket.socket() as s:
            s.connect(address)
            s.sendall(head + prefix + str(n).encode() + tail)
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

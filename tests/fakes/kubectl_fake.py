"""A fake ``kubectl`` that plays a control directory, for the kube server's tests.

Control directory: ``$KUBECTL_FAKE_DIR``.

* ``get R ... -o json`` (no ``--watch``): prints ``{"kind": "List", "items": [...]}``
  from ``R.json`` (a JSON list of objects). No such file: the real kubectl's
  unknown-type error on stderr, exit 1.
* ``get R ... --watch --output-watch-events -o json``: like the real one, first
  prints every object of ``R.json`` as an ``ADDED`` event, then copies the FIFO
  ``R.watch`` to stdout, line by line, each line flushed on its own (so a
  pretty-printed object arrives split over several reads). Control lines:
  ``#exit N`` ends the watch with status N; ``#stderr TEXT`` writes TEXT to
  stderr. It waits on the FIFO and on its stdout with ``poll`` (a blocking
  wait, no timeout): when the reader of stdout goes away it exits.
* ``api-resources -o name``: a fixed list.

Every invocation appends ``{"pid", "argv"}`` (one JSON line) to ``argv.log`` in the control dir.
"""

import json
import os
import select
import sys

API_RESOURCES = [
    "bindings",
    "configmaps",
    "endpoints",
    "events",
    "namespaces",
    "nodes",
    "pods",
    "podtemplates",
    "secrets",
    "services",
    "deployments.apps",
    "replicasets.apps",
    "jobs.batch",
    "cronjobs.batch",
]


def main(argv):
    control = os.environ["KUBECTL_FAKE_DIR"]
    with open(os.path.join(control, "argv.log"), "a") as log:
        log.write(json.dumps({"pid": os.getpid(), "argv": argv}) + "\n")
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["api-resources"]:
        sys.stdout.write("\n".join(API_RESOURCES) + "\n")
        return 0
    if words[:1] != ["get"] or len(words) < 2:
        sys.stderr.write(f"fake kubectl: unsupported command {argv!r}\n")
        return 2
    resource = words[1]
    path = os.path.join(control, resource + ".json")
    try:
        with open(path) as f:
            items = json.load(f)
    except FileNotFoundError:
        sys.stderr.write(f'error: the server doesn\'t have a resource type "{resource}"\n')
        return 1
    if "--watch" not in argv and "-w" not in argv:
        sys.stdout.write(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=4) + "\n")
        return 0
    out = sys.stdout
    for item in items:
        out.write(json.dumps({"type": "ADDED", "object": item}, indent=4) + "\n")
    out.flush()
    return tail(os.path.join(control, resource + ".watch"), out)


def tail(fifo_path, out):
    fd = os.open(fifo_path, os.O_RDONLY)  # blocks until the test holds a writer (it opens O_RDWR first)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(out.fileno(), 0)  # POLLERR/POLLHUP are always reported: the reader went away
    pending = b""
    while True:
        for ready_fd, mask in poller.poll():
            if ready_fd == out.fileno() and mask & (select.POLLERR | select.POLLHUP):
                return 0
            if ready_fd != fd:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return 0  # every writer closed: the test is over
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.startswith(b"#exit"):
                    out.flush()
                    return int(line.split()[1])
                if line.startswith(b"#stderr "):
                    sys.stderr.write(line[8:].decode() + "\n")
                    sys.stderr.flush()
                    continue
                out.buffer.write(line + b"\n")
                out.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

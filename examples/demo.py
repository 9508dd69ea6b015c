"""agentd's main job, offline, start to finish (``scripts/demo``).

1. starts ``agentd --mode reactive`` with the bundled memo server and the
   script model (no API key, no network);
2. waits until the subscription to ``memo://notes`` is established and the
   start-up re-read has woken one agent to read the notes as they are;
3. edits the notes file the way another program would (write + rename);
4. waits for the woken agent's answer on agentd's stdout;
5. sends SIGTERM and waits for the clean drain (exit 0).

Every wait is on agentd's own telemetry (NDJSON on stderr) with a timeout:
nothing here sleeps. ``--verbose`` shows the telemetry lines as they arrive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
START_TIMEOUT = 180.0
"""Start-up to the first subscription: a few seconds, but the first start after
an install compiles agentd's modules in three processes at once, which on a
busy 2-core machine has taken over half a minute."""
STEP_TIMEOUT = 30.0
"""Each later step (a wake, an answer, the drain) takes well under a second."""
T0 = time.monotonic()
#: Telemetry events worth a progress line while agentd starts, the first time each is seen.
MILESTONES = {
    "supervisor.start": "agentd is up (pid {pid})",
    "upstream.connected": "connected to the memo server ({protocol_version})",
    "zygote.ready": "the agent template is warm: agents now start by fork",
}


def say(text: str) -> None:
    """One progress line, with the seconds since the demo started."""
    print(f"[{time.monotonic() - T0:5.1f}s] {text}", flush=True)


class DemoFailed(Exception):
    """A step did not happen; the message says which."""


async def main(verbose: bool) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="agentd-demo-"))
    notes = workdir / "notes.json"
    notes.write_text("{}")
    cmd = [
        sys.executable, "-m", "agentd", "--config", str(HERE / "reactive-demo.toml"),
        "--model", f"script:{HERE / 'scripts' / 'reactive-demo.json'}",
        "--mcp-stdio", f"memo={sys.executable} -m agentd serve memo --file {notes}",
        "--verbose",
    ]
    say(f"$ agentd --mode reactive --config examples/reactive-demo.toml  (notes file: {notes})")
    say("starting agentd, its memo server and its agent template (the first start after an")
    say("install also compiles their modules: up to half a minute on a busy machine)")
    proc = await trio.lowlevel.open_process(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE)
    events: list[dict] = []
    out: list[str] = []
    changed = trio.Event()

    async def pump(stream: trio.abc.ReceiveStream, sink: list, parse: bool) -> None:
        nonlocal changed
        buf = b""
        while chunk := await stream.receive_some(65536):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                if parse:
                    try:
                        event = json.loads(text)
                    except ValueError:
                        say(f"  [agentd stderr] {text}")
                        continue
                    sink.append(event)
                    if verbose:
                        say(f"  [telemetry] {text}")
                    elif event.get("event") in MILESTONES:
                        say("   " + MILESTONES.pop(event["event"]).format_map(event))
                else:
                    sink.append(text)
                    say(f"  [agentd stdout] {text}")
            changed.set()
            changed = trio.Event()
        changed.set()

    async def wait_for(pred, what: str, timeout: float = STEP_TIMEOUT) -> dict | str:
        with trio.move_on_after(timeout):
            while True:
                for item in (events if what != "output" else out):
                    if pred(item):
                        return item
                if proc.returncode is not None:
                    raise DemoFailed(f"agentd exited with {proc.returncode} while the demo waited for {what}")
                await changed.wait()
        raise DemoFailed(f"no {what} within {timeout:.0f} s")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, proc.stderr, events, True)
        nursery.start_soon(pump, proc.stdout, out, False)
        try:
            await wait_for(
                lambda e: e.get("event") == "subscription.established", "subscription", START_TIMEOUT
            )
            say("1. subscribed to memo://notes")
            await wait_for(lambda s: s.startswith("The notes now say: {}"), "output")
            say("2. start-up re-read: one agent read the notes as they are (anything changed while")
            say("   agentd was down is handled at start); now the daemon is idle")
            tmp = notes.with_suffix(".tmp")
            tmp.write_text(json.dumps({"todo": "ship the release", "owner": "sam"}))
            os.replace(tmp, notes)
            say("3. another program edited the notes file")
            spawn = await wait_for(
                lambda e: e.get("event") == "subagent.spawn" and e.get("agent") != "a1", "spawn"
            )
            say(f"4. the change was routed ({spawn.get('route')}) and woke agent {spawn['agent']}")
            await wait_for(lambda s: "ship the release" in s, "output")
            say("5. the agent read the resource and answered (above)")
            proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(STEP_TIMEOUT):
                code = await proc.wait()
                say(f"6. SIGTERM -> drained cleanly, exit code {code}")
                return code
            raise DemoFailed(f"agentd did not drain within {STEP_TIMEOUT:.0f} s of SIGTERM")
        except DemoFailed as exc:
            say(f"the demo failed: {exc}; agentd's last telemetry lines:")
            for event in events[-15:]:
                say("  " + json.dumps(event)[:300])
            return 1
        finally:
            if proc.returncode is None:
                proc.kill()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    raise SystemExit(trio.run(main, "--verbose" in sys.argv[1:]))

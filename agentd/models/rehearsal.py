"""One model call against a loopback answer, before forking: the first real call then runs warm.

A child's first model call pays for code that runs once per process: the
model's construction, the request's serialisation, the HTTP client's send
and receive path, the answer's parsing and pricing. Measured here, that is
5-10 ms of the child's first request (spawn → the request at the provider).
The zygote (and a once run's pre-forked root) calls :func:`rehearse` before
it forks: one complete round trip with each HTTP wire API the run uses,
against a one-shot server on 127.0.0.1 in this process that answers a
minimal, valid body of that API. No byte leaves the machine, no key is
sent (the rehearsal's own placeholder is), and nothing it created (the
client, its connection) survives it.
"""

from __future__ import annotations

import contextlib

import orjson
import trio

from agentd.core.jsonvalue import JSONObject

#: A minimal valid answer per wire API (text only, one token each way).
_ANSWERS: dict[str, JSONObject] = {
    "chat": {
        "model": "rehearsal",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    },
    "messages": {
        "model": "rehearsal",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}

#: Bound on the whole rehearsal: it is an optimisation, never a reason to wait.
REHEARSAL_TIMEOUT = 5.0

#: The specs rehearsed, by prefix: the built-in HTTP providers whose endpoint comes from the environment.
_SPECS = {"openai": ("chat", "OPENAI"), "anthropic": ("messages", "ANTHROPIC")}


async def rehearse(specs: list[str]) -> None:
    """One call per distinct wire API among ``specs`` (``openai:``, ``anthropic:``); errors are ignored."""
    wanted: dict[str, str] = {}
    for spec in specs:
        prefix, sep, name = spec.partition(":")
        if sep and prefix in _SPECS and name:
            wanted.setdefault(prefix, spec)
    if not wanted:
        return
    with trio.move_on_after(REHEARSAL_TIMEOUT), contextlib.suppress(Exception):
        for prefix, spec in sorted(wanted.items()):
            await _one(spec, *_SPECS[prefix])


async def _one(spec: str, api: str, env_prefix: str) -> None:
    from agentd.models import Message, Prompt, ToolSpec, make_model

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if api == "chat" else "")
    env = {f"{env_prefix}_BASE_URL": base, f"{env_prefix}_API_KEY": "rehearsal"}
    model = make_model(spec, env=env, timeout=REHEARSAL_TIMEOUT, max_attempts=1)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_answer_once, listeners[0], orjson.dumps(_ANSWERS[api]))
            tool = ToolSpec(name="rehearsal", description="", input_schema={"type": "object"})
            await model.complete(Prompt(system="s", messages=[Message.user("hi")], tools=[tool]))
            nursery.cancel_scope.cancel()
    finally:
        await model.aclose()
        for listener in listeners:
            await listener.aclose()


async def _answer_once(listener: trio.SocketListener, body: bytes) -> None:
    stream = await listener.accept()
    async with stream:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive_some(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )

"""The webhook server's pure parts: signatures per kind (the senders' published examples), what a
request means, how a delivery is shown, and sources as configuration."""

from __future__ import annotations

import base64
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.core.errors import ConfigError
from agentd.servers._inboxlog import InboxLog
from agentd.servers.webhook.delivery import (
    INLINE_BODY,
    MAX_DEPTH,
    Accepted,
    Reply,
    decode_record,
    encode_record,
    interpret,
    log_event,
    make_parser,
    summarize,
)
from agentd.servers.webhook.sources import Credential, SourceSpec, merge_sources, parse_flag, parse_table
from agentd.servers.webhook.verify import (
    SLACK_WINDOW,
    Refusal,
    check_body,
    check_headers,
    github_signature,
    slack_signature,
)
from tests.support.webhooks import (
    GITHUB_EXAMPLE_BODY,
    GITHUB_EXAMPLE_SIGNATURE,
    GITHUB_SECRET,
    SLACK_EXAMPLE_BODY,
    SLACK_EXAMPLE_SIGNATURE,
    SLACK_EXAMPLE_TIMESTAMP,
    SLACK_SECRET,
    alertmanager_firing,
    dumps,
    generic_headers,
    github_headers,
    github_issue_labeled,
    slack_headers,
    slack_message_event,
)

NOW = 1_800_000_000.0


def cred(*values: str, origin: str = "$X") -> Credential:
    return Credential(tuple(v.encode() for v in values), origin)


GITHUB = SourceSpec("github", "github", secret=cred(GITHUB_SECRET))
SLACK = SourceSpec("slack", "slack", secret=cred(SLACK_SECRET))
ALERTS = SourceSpec("alerts", "alertmanager", token=cred("a" * 20), dedupe_window=300.0)
ALERTS_BASIC = SourceSpec("alerts", "alertmanager", username="am", password=cred("p" * 20))
GENERIC = SourceSpec(
    "deploys", "generic", secret=cred("generic-secret-for-tests"), signature_header="X-Signature-256",
    signature_prefix="sha256=", event_header="X-Event",
)  # fmt: skip


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


# --------------------------------------------------------------------------- published examples


def test_github_published_example_verifies() -> None:
    """GitHub's docs: secret "It's a Secret to Everybody", body "Hello, World!" -> this signature."""
    assert github_signature(GITHUB_SECRET.encode(), GITHUB_EXAMPLE_BODY) == GITHUB_EXAMPLE_SIGNATURE
    headers = {"x-hub-signature-256": GITHUB_EXAMPLE_SIGNATURE}
    assert check_headers(GITHUB, headers) is None
    assert check_body(GITHUB, headers, GITHUB_EXAMPLE_BODY, now=NOW) is None


def test_slack_published_example_verifies_inside_its_window_and_is_stale_outside() -> None:
    """Slack's docs: the slash-command body at timestamp 1531420618 signs to v0=a2114d57…"""
    ts = int(SLACK_EXAMPLE_TIMESTAMP)
    assert (
        slack_signature(SLACK_SECRET.encode(), SLACK_EXAMPLE_TIMESTAMP, SLACK_EXAMPLE_BODY)
        == SLACK_EXAMPLE_SIGNATURE
    )
    headers = {
        "x-slack-signature": SLACK_EXAMPLE_SIGNATURE,
        "x-slack-request-timestamp": SLACK_EXAMPLE_TIMESTAMP,
    }
    assert check_body(SLACK, headers, SLACK_EXAMPLE_BODY, now=ts + 30) is None
    assert check_body(SLACK, headers, SLACK_EXAMPLE_BODY, now=ts - SLACK_WINDOW) is None
    stale = check_body(SLACK, headers, SLACK_EXAMPLE_BODY, now=ts + SLACK_WINDOW + 1)
    assert stale is not None
    assert (stale.status, stale.code) == (401, "stale")
    assert "more than 300 s" in stale.reason


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("spec", "headers", "body", "code", "match"),
    [
        (GITHUB, {}, b"{}", "unauthenticated", "no X-Hub-Signature-256"),
        (GITHUB, {"x-hub-signature-256": "sha1=abc"}, b"{}", "bad_signature", "must be sha256=HEX"),
        (GITHUB, {"x-hub-signature-256": "sha256=" + "0" * 64}, b"{}", "bad_signature", "does not match"),
        (SLACK, {"x-slack-signature": "v0=00"}, b"{}", "unauthenticated", "no x-slack-request-timestamp"),
        (ALERTS, {}, b"{}", "unauthenticated", "no Authorization header"),
        (ALERTS, {"authorization": "Basic eDp5"}, b"{}", "unauthenticated", "not a bearer token"),
        (ALERTS, {"authorization": "Bearer " + "b" * 20}, b"{}", "unauthenticated", "bearer token is wrong"),
        (ALERTS_BASIC, {"authorization": "Basic !!"}, b"{}", "unauthenticated", "not base64"),
        (ALERTS_BASIC, {"authorization": "Basic " + base64.b64encode(b"am:wrong").decode()}, b"{}", "unauthenticated", "wrong"),
        (GENERIC, {}, b"{}", "unauthenticated", "no X-Signature-256 header"),
        (GENERIC, {"x-signature-256": "md5=00"}, b"{}", "bad_signature", "must start with 'sha256='"),
        (GENERIC, {"x-signature-256": "sha256=00"}, b"{}", "bad_signature", "does not match"),
    ],
)  # fmt: skip
def test_refusals_name_what_was_wrong(
    spec: SourceSpec, headers: dict[str, str], body: bytes, code: str, match: str
) -> None:
    refusal = check_headers(spec, headers) or check_body(spec, headers, body, now=NOW)
    assert isinstance(refusal, Refusal)
    assert refusal.status == 401
    assert refusal.code == code
    assert match in refusal.reason


@pytest.mark.parametrize(
    "stamp", ["soon", "\u00b2", "\u0661\u0662\u0663", "\uff11\uff12", "1_5", " ", "9" * 13]
)
def test_a_slack_timestamp_not_in_ascii_digits_is_a_400_never_an_error(stamp: str) -> None:
    """``²`` passes ``str.isdigit()`` and ``int()`` refuses it; ``١٢٣`` ``int()`` reads: neither is a time."""
    headers = {"x-slack-signature": "v0=00", "x-slack-request-timestamp": stamp}
    refusal = check_headers(SLACK, headers) or check_body(SLACK, headers, b"{}", now=NOW)
    assert isinstance(refusal, Refusal)
    assert (refusal.status, refusal.code) == (400, "malformed")
    assert "Unix seconds in ASCII digits" in refusal.reason


def test_a_refusal_never_carries_the_secret_or_the_expected_signature() -> None:
    body = b'{"x": 1}'
    refusal = check_body(GITHUB, {"x-hub-signature-256": "sha256=" + "0" * 64}, body, now=NOW)
    assert refusal is not None
    assert GITHUB_SECRET not in refusal.reason
    assert github_signature(GITHUB_SECRET.encode(), body) not in refusal.reason


def test_rotation_any_line_of_a_secret_file_verifies() -> None:
    spec = SourceSpec("github", "github", secret=cred("old-secret", GITHUB_SECRET))
    body = b'{"zen": "x"}'
    for secret in ("old-secret", GITHUB_SECRET):
        headers = {"x-hub-signature-256": github_signature(secret.encode(), body)}
        assert check_body(spec, headers, body, now=NOW) is None


def test_basic_auth_and_bearer_pass_before_the_body() -> None:
    ok_basic = {"authorization": "Basic " + base64.b64encode(b"am:" + b"p" * 20).decode()}
    assert check_headers(ALERTS_BASIC, ok_basic) is None
    assert check_headers(ALERTS, {"authorization": "bearer " + "a" * 20}) is None


def test_generic_base64_signatures_verify() -> None:
    spec = SourceSpec(
        "b64", "generic", secret=cred("s" * 20), signature_header="X-Sig", signature_encoding="base64"
    )
    body = b'{"a": 1}'
    h = generic_headers(body, secret="s" * 20, b64=True)
    headers = {"x-sig": h["X-Signature-256"].removeprefix("sha256=")}
    assert check_body(spec, headers, body, now=NOW) is None
    assert check_body(spec, {"x-sig": "not base64!"}, body, now=NOW) == Refusal(
        401, "bad_signature", "X-Sig is not base64"
    )


# --------------------------------------------------------------------------- interpret


def test_github_issue_is_accepted_with_its_delivery_id_and_event() -> None:
    body = dumps(github_issue_labeled())
    out = interpret(GITHUB, lower(github_headers(body, "72d3162e-cc78-11e3")), body, now=NOW, nonce="n")
    assert isinstance(out, Accepted)
    assert (out.delivery_id, out.dedupe_key, out.event) == (
        "72d3162e-cc78-11e3",
        "72d3162e-cc78-11e3",
        "issues",
    )
    assert out.body == github_issue_labeled()
    assert "x-hub-signature-256" not in out.headers
    assert out.headers["x-github-hook-id"] == "292430182"


def test_github_ping_is_answered_not_stored() -> None:
    body = dumps({"zen": "Keep it logically awesome.", "hook_id": 1})
    out = interpret(GITHUB, lower(github_headers(body, "p-1", event="ping")), body, now=NOW, nonce="n")
    assert out == Reply(200, {"ok": True, "ping": True, "zen": "Keep it logically awesome."}, "ping")


def test_github_form_encoded_payload_is_parsed() -> None:
    payload = github_issue_labeled()
    body = b"payload=" + json.dumps(payload).replace(" ", "").encode().replace(b"&", b"%26")
    headers = lower(github_headers(body, "f-1"))
    headers["content-type"] = "application/x-www-form-urlencoded"
    out = interpret(GITHUB, headers, body, now=NOW, nonce="n")
    assert isinstance(out, Accepted)
    assert isinstance(out.body, dict)
    assert out.body["issue"]["number"] == 1347  # type: ignore[index,call-overload]


def test_slack_challenge_event_and_slash_command() -> None:
    body = dumps(
        {
            "token": "t",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification",
        }
    )
    out = interpret(SLACK, lower(slack_headers(body)), body, now=NOW, nonce="n")
    assert out == Reply(
        200, {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}, "url_verification"
    )
    body = dumps(slack_message_event("Ev9"))
    out = interpret(SLACK, lower(slack_headers(body)), body, now=NOW, nonce="n")
    assert isinstance(out, Accepted)
    assert (out.delivery_id, out.event) == ("Ev9", "message")
    form = {"content-type": "application/x-www-form-urlencoded"}
    out = interpret(SLACK, form, SLACK_EXAMPLE_BODY, now=NOW, nonce="n")
    assert isinstance(out, Accepted)
    assert out.event == "slash_command"
    assert out.delivery_id == "398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    assert isinstance(out.body, dict)
    assert out.body["command"] == "/webhook-collect"


def test_alertmanager_notification_is_one_delivery_deduped_by_its_content() -> None:
    body = dumps(alertmanager_firing())
    a = interpret(ALERTS, {"content-type": "application/json"}, body, now=NOW, nonce="n")
    b = interpret(ALERTS, {"content-type": "application/json"}, body, now=NOW + 5, nonce="n")
    assert isinstance(a, Accepted)
    assert isinstance(b, Accepted)
    assert a.event == "firing"
    assert a.dedupe_key == b.dedupe_key
    assert a.delivery_id != b.delivery_id
    bad = interpret(ALERTS, {}, b'{"status": "firing"}', now=NOW, nonce="n")
    assert isinstance(bad, Refusal)
    assert "'alerts' list" in bad.reason


def test_generic_keys_become_uri_safe_ids() -> None:
    body = b'{"a": 1}'
    out = interpret(
        GENERIC, {"idempotency-key": "run-42", "x-event": "deploy.failed"}, body, now=NOW, nonce="n"
    )
    assert isinstance(out, Accepted)
    assert (out.delivery_id, out.dedupe_key, out.event) == ("run-42", "key:run-42", "deploy.failed")
    odd = interpret(GENERIC, {"idempotency-key": "../../etc passwd"}, body, now=NOW, nonce="n")
    assert isinstance(odd, Accepted)
    assert odd.delivery_id.startswith("k-")
    assert len(odd.delivery_id) == 34
    assert odd.event == "delivery"
    none = interpret(GENERIC, {}, b"", now=NOW, nonce="abc")
    assert isinstance(none, Accepted)
    assert (none.delivery_id, none.dedupe_key, none.body) == ("d-abc", None, None)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\xff\xfe{}", "not valid JSON in UTF-8"),
        (b'{"a": "\\ud800"}', "not valid JSON"),
        (b"[" * 100 + b"]" * 100, f"deeper than {MAX_DEPTH} levels"),
        (b"[" * 5000 + b"]" * 5000, "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"   ", "the body is empty"),
    ],
)
def test_hostile_bodies_are_refused_before_storing(body: bytes, match: str) -> None:
    out = interpret(GITHUB, lower(github_headers(body, "h-1")), body, now=NOW, nonce="n")
    assert isinstance(out, Refusal)
    assert (out.status, out.code) == (400, "malformed")
    assert match in out.reason


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([GITHUB, SLACK, ALERTS, GENERIC]),
    st.dictionaries(st.sampled_from(["content-type", "x-github-event", "x-github-delivery", "idempotency-key", "x-event"]), st.text(max_size=40)),
    st.binary(max_size=300) | st.builds(lambda v: json.dumps(v).encode(), st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c), max_leaves=30)),
)  # fmt: skip
def test_interpret_never_raises_and_accepts_only_json_it_can_store(
    spec: SourceSpec, headers: dict[str, str], body: bytes
) -> None:
    out = interpret(spec, headers, body, now=NOW, nonce="n")
    assert isinstance(out, Accepted | Reply | Refusal)
    if isinstance(out, Accepted):
        line = encode_record(spec, out, out.delivery_id, received_at=NOW)
        assert line.count(b"\n") == 1
        record = decode_record(line)
        assert record is not None
        assert record.body == out.body


# --------------------------------------------------------------------------- how a delivery is shown


def test_a_big_body_is_shown_as_a_bounded_digest() -> None:
    body = {
        "issue": {"title": "t", "body": "x" * 100_000, "labels": [{"name": f"l{i}"} for i in range(500)]},
        "action": "labeled",
    }
    digest, cut = summarize(body)
    assert cut
    assert len(orjson.dumps(digest)) <= INLINE_BODY
    assert digest["action"] == "labeled"  # type: ignore[index,call-overload]
    assert summarize({"a": 1}) == ({"a": 1}, False)
    deep: object = "leaf"
    for _ in range(60):
        deep = {"k": deep}
    assert len(orjson.dumps(summarize({"d": deep, "pad": "y" * 9000})[0])) <= INLINE_BODY


def test_the_log_numbers_deliveries_and_names_damaged_lines() -> None:
    body = dumps(github_issue_labeled())
    accepted = interpret(GITHUB, lower(github_headers(body, "g-1")), body, now=NOW, nonce="n")
    assert isinstance(accepted, Accepted)
    line = encode_record(GITHUB, accepted, "g-1", received_at=NOW)
    seen: list[object] = []
    log = InboxLog("github", "webhook://github/events", parse=make_parser(lambda o, e, r: seen.append(r)))
    fed = log.feed(line + b"garbage line\n", at_eof=True)
    assert [e.event["type"] for e in fed.entries] == ["DELIVERY", "ERROR"]
    first = fed.entries[0].event
    assert first == log_event(decode_record(line), seq=1)  # type: ignore[arg-type]
    assert (first["seq"], first["id"], first["event"], first["delivery_uri"]) == (
        1,
        "g-1",
        "issues",
        "webhook://github/event/g-1",
    )
    garbage_at = len(line)
    assert f"bytes {garbage_at}..{garbage_at + 13} of webhook://github/events cannot be read" in str(
        fed.entries[1].event["message"]
    )
    assert seen[1] is None


# --------------------------------------------------------------------------- sources


def test_sources_from_flags_and_file_with_secrets_from_env_and_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret_file = tmp_path / "alerts-token"
    secret_file.write_text("t" * 24 + "\n")
    env = {"GH": "s3cret-value-1234"}
    specs = merge_sources(
        {"alerts": {"kind": "alertmanager", "token_file": str(secret_file)}, "github": {"kind": "slack", "secret_env": "GH"}},
        ["github=github,secret-env=GH"],
        env=env,
    )  # fmt: skip
    by_name = {s.name: s for s in specs}
    assert by_name["github"].kind == "github"  # the flag replaced the file's source of that name
    assert by_name["alerts"].token == Credential((b"t" * 24,), str(secret_file))
    assert by_name["alerts"].dedupe_window == 300.0
    assert "s3cret" not in repr(specs)
    assert "t" * 24 not in repr(specs)


@pytest.mark.parametrize(
    ("name", "table", "match"),
    [
        ("GitHub", {"kind": "github", "secret_env": "GH"}, r"sources\.GitHub: 'GitHub' is not valid: name a source"),
        ("gh", {"kind": "gitlab"}, r"sources\.gh\.kind: 'gitlab' is not valid: choose one of github, slack"),
        ("gh", {"kind": "github", "secret": "hunter2"}, r"sources\.gh\.secret: '[^']+' is not valid: secrets never go in"),
        ("gh", {"kind": "github"}, r"needs its webhook secret \(give secret_env or secret_file\)"),
        ("gh", {"kind": "github", "secret_env": "MISSING"}, r"the environment variable MISSING is not set"),
        ("gh", {"kind": "github", "secret_file": "/nonexistent/x"}, r"sources\.gh\.secret_file: '/nonexistent/x' is not valid: it cannot be read"),
        ("gh", {"kind": "github", "secret_env": "GH", "token_env": "GH"}, r"token_env applies to alertmanager/generic"),
        ("am", {"kind": "alertmanager"}, r"needs a bearer token"),
        ("am", {"kind": "alertmanager", "token_env": "SHORT"}, r"a credential of 5 characters: use at least 16"),
        ("am", {"kind": "alertmanager", "password_env": "GH"}, r"basic auth needs a username"),
        ("g", {"kind": "generic", "secret_env": "GH"}, r"needs the header the sender puts its signature in"),
        ("g", {"kind": "generic"}, r"exactly one of an HMAC secret"),
        ("g", {"kind": "generic", "token_env": "GH", "signature_encoding": "hex", "bogus": 1}, r"sources\.g\.bogus: 1 is not valid: unknown key"),
        ("g", {"kind": "generic", "secret_env": "GH", "signature_header": "X Sig"}, r"give an HTTP header name"),
    ],
)  # fmt: skip
def test_bad_sources_name_the_setting_and_the_fix(name: str, table: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_table(name, table, env={"GH": "a-long-enough-secret", "SHORT": "12345"})


def test_a_secret_on_the_command_line_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError, match=r"secrets never go on the command line") as info:
        parse_flag("gh=github,secret=hunter2")
    assert "hunter2" not in str(info.value)
    with pytest.raises(ConfigError, match=r"write NAME=KIND"):
        parse_flag("github")

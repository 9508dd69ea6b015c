"""Settings that do nothing (agentd/supervisor/routing/unmatched.py, rfcs/0315): the pure checks, without servers."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from agentd.events import ServerState
from agentd.supervisor.routing.unmatched import (
    Down,
    Finding,
    Offer,
    against_offers,
    at_start,
    before_start,
    overlaps,
    unavailable,
)
from agentd.triggers.glob import compile_glob
from agentd.triggers.patterns import template_atoms
from agentd.upstream.resolve import Catalog
from tests.support.settings import load

MEMO = Offer(("memo_get", "memo_set"), Catalog(uris=frozenset({"memo://notes"})))
FILES = Offer(
    ("read_file",),
    Catalog(uris=frozenset({"file:///srv/a.txt"}), templates=("file:///srv/{name}", "file-events://{+path}")),
)
SELF = ("subscribe", "read_resource", "list_resources")


def only(findings: list[Finding], kind: str) -> Finding:
    found = [f for f in findings if f.kind == kind]
    assert len(found) == 1, findings
    return found[0]


def assert_says(finding: Finding, pattern: str) -> None:
    assert re.search(pattern, finding.message()), finding.message()


# -- do two patterns meet? ---------------------------------------------------------------


def test_a_glob_meets_a_template_when_some_uri_fits_both() -> None:
    assert overlaps(compile_glob("memo://notes/*"), template_atoms("memo://notes/{key}"))
    assert overlaps(compile_glob("memo://notes/**"), template_atoms("memo://notes/{key}"))
    assert overlaps(compile_glob("file:///a/**/b.json"), template_atoms("file:///{+path}"))
    assert overlaps(compile_glob("kube://pods\\?ns=*"), template_atoms("kube://pods{?ns}"))


def test_a_glob_does_not_meet_a_template_no_uri_fits_both() -> None:
    assert not overlaps(compile_glob("memo://todo/*"), template_atoms("memo://notes/{key}"))
    # A simple expression never holds a "/": a deeper glob cannot be made by it.
    assert not overlaps(compile_glob("memo://notes/*/x"), template_atoms("memo://notes/{key}"))
    assert not overlaps(compile_glob("file:///a/*.json"), template_atoms("file:///a/{name}.txt"))


def test_two_globs_meet_when_some_uri_fits_both() -> None:
    assert overlaps(compile_glob("memo://*"), compile_glob("memo://notes"))
    assert overlaps(compile_glob("a/**/b"), compile_glob("a/b"))
    assert overlaps(compile_glob("a/**/b"), compile_glob("a/x/?/b"))
    assert not overlaps(compile_glob("memo://*"), compile_glob("memo://a/b"))
    assert not overlaps(compile_glob("a/**/b"), compile_glob("a/x/y/c"))


_CHARS = st.sampled_from("ab/:.")
_WILD = st.sampled_from(["*", "**", "?", "**/"])


@st.composite
def uri_and_two_globs(draw: st.DrawFn) -> tuple[str, str, str]:
    """A URI, and two globs made from it by replacing parts with wildcards that still match it."""
    uri = draw(st.text(_CHARS, min_size=1, max_size=12))

    def glob() -> str:
        out, i = [], 0
        while i < len(uri):
            if not draw(st.booleans()):  # a literal character (what shrinking goes to)
                out.append(uri[i])
                i += 1
                continue
            wild = draw(_WILD)
            end = draw(st.integers(i, len(uri)))
            part = uri[i:end]
            fits = {
                "*": "/" not in part,
                "**": True,
                "?": len(part) == 1 and part != "/",
                "**/": part == "" or part.endswith("/"),
            }[wild]
            if fits:
                out.append(wild)
                i = end
            else:
                out.append(uri[i])
                i += 1
        return "".join(out)

    return uri, glob(), glob()


@given(uri_and_two_globs())
def test_globs_that_match_one_uri_always_meet(case: tuple[str, str, str]) -> None:
    uri, left, right = case
    a, b = compile_glob(left), compile_glob(right)
    # "**/" is a whole-segment wildcard only at a segment's start; elsewhere it reads otherwise.
    assume(a.match(uri) and b.match(uri))
    assert overlaps(a, b)
    assert overlaps(b, a)


# -- before any server starts ---------------------------------------------------------


def test_a_reactive_run_with_no_subscription_and_no_timer_is_told_it_can_never_wake(tmp_path: Path) -> None:
    s = load(tmp_path, mode="reactive", mcp_stdio=["memo=memo-server"])
    finding = only(before_start(s), "reactive")
    assert_says(
        finding,
        r"^--mode: 'reactive' has no subscription and no timer: nothing will ever wake an agent — "
        r"fix: subscribe to what should wake it \(--subscribe \[SERVER:\]URI.*--interval or --cron.*--mode once$",
    )


def test_a_reactive_run_with_a_subscription_or_a_timer_is_not(tmp_path: Path) -> None:
    subscribed = load(tmp_path, mode="reactive", mcp_stdio=["memo=m"], subscriptions=["memo:memo://notes"])
    timed = load(tmp_path, mode="reactive", interval="1m", routes=["@timer=spawn"])
    assert before_start(subscribed) == []
    assert before_start(timed) == []


def test_a_reactive_run_with_a_state_dir_is_told_what_could_still_wake_it(tmp_path: Path) -> None:
    s = load(tmp_path, mode="reactive", state_dir=str(tmp_path / "state"))
    assert_says(only(before_start(s), "reactive"), r"unless sessions or watches an earlier run saved")
    assert before_start(s, restored=True) == []
    assert_says(only(before_start(s, restored=False), "reactive"), r"wake an agent — fix")


def test_a_route_no_subscription_feeds_is_told(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        mode="reactive",
        mcp_stdio=["memo=m"],
        subscriptions=["memo:memo://notes"],
        routes=["memo://todo/*=spawn", "memo://*=spawn,name=all", "@timer=spawn"],
        interval="1h",
    )
    finding = only(before_start(s), "route")
    assert_says(
        finding,
        r"^--route \(routes\[0\]\.match\): 'memo://todo/\*' matches no declared subscription: a route "
        r"receives only changes of subscribed URIs, so it never fires — fix: subscribe to the URIs",
    )


# -- against what the servers offer ---------------------------------------------------


def test_a_route_glob_matching_a_resource_or_a_template_is_fine(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        mcp_stdio=["memo=m", "files=f"],
        routes=["memo://notes=spawn", "file:///srv/*.md=spawn", "file-events://**=spawn"],
    )
    assert against_offers(s, {"memo": MEMO, "files": FILES}) == []


def test_a_route_glob_matching_nothing_offered_says_what_is_offered_now(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=m", "files=f"], routes=["memo://todo/*=spawn,name=todo"])
    finding = only(against_offers(s, {"memo": MEMO, "files": FILES}), "route")
    assert_says(
        finding,
        r"^--route 'todo' \(routes\[0\]\.match\): 'memo://todo/\*' matches nothing the servers offer now "
        r"\('memo' offers memo://notes; 'files' offers file:///srv/a\.txt, file:///srv/\{name\}, "
        r"file-events://\{\+path\}\) — fix: write the match as a URI or glob of what the servers list "
        r"\(agentd check --connect shows it\)",
    )


def test_a_server_that_is_down_is_named_and_its_part_left_open(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=agentdd serve memo", "files=f"], routes=["memo://todo/*=spawn"])
    down = Down(ServerState.RESTARTING, "server 'memo' cannot start 'agentdd': No such file or directory")
    findings = against_offers(s, {"memo": down, "files": FILES})
    assert_says(
        only(findings, "server"),
        r"^server memo \(--mcp-stdio memo\): 'agentdd serve memo' did not start: server 'memo' cannot start "
        r"'agentdd': No such file or directory; agentd keeps retrying with backoff, and runs without it — "
        r"fix: fix the server's command or URL",
    )
    assert_says(only(findings, "route"), r"\('memo' did not connect: what it offers is not known\) — fix")


def test_an_exact_subscription_no_server_has_is_told(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        mcp_stdio=["memo=m", "files=f"],
        subscriptions=["memo:memo://nosuch", "memo://notes", "file:///srv/b.txt", "files:file:///srv/c"],
    )
    finding = only(against_offers(s, {"memo": MEMO, "files": FILES}), "subscription")
    assert_says(
        finding,
        r"^--subscribe \(subscribe\[0\]\): 'memo:memo://nosuch' is listed by no server and matches none of "
        r"their resource templates now \('memo' offers memo://notes\) — fix: subscribe to a URI a server "
        r"lists or one of its templates matches",
    )


def test_subscriptions_already_told_are_not_told_twice(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=m"], subscriptions=["memo://t*"])
    assert_says(
        only(against_offers(s, {"memo": MEMO}), "subscription"), r"matches no resource the servers list now"
    )
    assert against_offers(s, {"memo": MEMO}, told={"memo://t*"}) == []


def test_an_allow_glob_matching_no_tool_says_agents_get_none(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=m"], allowed_tools="memo__nosuch*")
    finding = only(against_offers(s, {"memo": MEMO}, self_tools=SELF), "tool_rule")
    assert_says(
        finding,
        r"^--allowed-tools: 'memo__nosuch\*' matches no tool the servers offer now \(tools: memo__memo_get, "
        r"memo__memo_set\) — fix: write globs of the tools as listed \(agentd check --connect lists them\); "
        r"as written, the allow list lets no server tool through: agents get none$",
    )


def test_one_dead_glob_in_a_working_allow_list_is_told_as_such(tmp_path: Path) -> None:
    s = load(tmp_path, mcp_stdio=["memo=m"], allowed_tools="memo__memo_get,memo_set")
    finding = only(against_offers(s, {"memo": MEMO}, self_tools=SELF), "tool_rule")
    assert_says(finding, r"^--allowed-tools: 'memo_set' matches no tool .*; this glob lets nothing through$")


def test_deny_globs_and_per_server_and_route_rules_are_matched_as_the_policy_spells_them(
    tmp_path: Path,
) -> None:
    s = load(
        tmp_path,
        toml="""
disallowed_tools = ["subscribe", "memo__memo_s*", "memo__gone"]
[servers.memo]
command = "m"
allowed_tools = ["memo_get", "memo__memo_get"]
[[routes]]
match = "memo://notes"
name = "notes"
disallowed_tools = ["files__*"]
""",
    )
    findings = against_offers(s, {"memo": MEMO}, self_tools=SELF)
    assert [(f.setting, f.value) for f in findings] == [
        ("--disallowed-tools", "memo__gone"),
        ("servers.memo.allowed_tools", "memo__memo_get"),
        ("--route 'notes' (routes[0].disallowed_tools)", "files__*"),
    ]
    assert_says(findings[0], r"a deny glob that matches nothing removes nothing$")


def test_at_start_says_a_route_once(tmp_path: Path) -> None:
    s = load(tmp_path, mode="reactive", mcp_stdio=["memo=m"], routes=["memo://todo/*=spawn"])
    findings = at_start(s, {"memo": MEMO})
    assert [f.kind for f in findings] == ["reactive", "route"]
    assert_says(findings[1], r"matches no declared subscription")


def test_the_exit_summary_names_the_servers_not_connected() -> None:
    states = {
        "memo": ServerState.RESTARTING,
        "files": ServerState.CONNECTED,
        "kube": ServerState.FAILED,
        "gone": ServerState.STOPPED,
    }
    errors = {"memo": "cannot start 'agentdd'", "kube": None}
    assert unavailable(states, errors) == {"memo": "restarting: cannot start 'agentdd'", "kube": "failed"}

"""Redaction's length boundary: a registered six-character secret is hidden everywhere (docs/testing.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentd.core import redact as redact_module
from agentd.core.redact import (
    MIN_REGISTERED_CHARS,
    REDACTED,
    is_secret_flag,
    looks_like_token,
    redact,
    register_secrets,
    secret_values,
    secrets_in,
)


@pytest.fixture(autouse=True)
def _empty_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with nothing registered (registration is process-wide and append-only).

    Without this a test passes on values another test, or an earlier run in the
    same process (mutmut forks its mutants from one), registered already.
    """
    monkeypatch.setattr(redact_module, "_known", set())
    monkeypatch.setattr(redact_module, "_known_sorted", [])
    redact_module._cached_text.cache_clear()
    yield
    redact_module._cached_text.cache_clear()


# Values no other test registers or prints.
SIX = "Q7zx2K"
FIVE = "W9vq4"


def test_a_registered_secret_of_exactly_the_minimum_length_is_hidden_alone_and_inside_text() -> None:
    assert len(SIX) == MIN_REGISTERED_CHARS == 6
    register_secrets([SIX])
    assert redact(SIX) == REDACTED
    assert redact(f"server said {SIX}!") == f"server said {REDACTED}!"
    assert redact({"note": SIX}) == {"note": REDACTED}
    assert redact(["run", SIX]) == ["run", REDACTED]
    assert redact("x", extra=[SIX]) == "x"


def test_a_value_one_character_shorter_is_not_registered() -> None:
    assert len(FIVE) == MIN_REGISTERED_CHARS - 1
    register_secrets([FIVE])
    assert redact(f"build {FIVE} done") == f"build {FIVE} done"


def test_an_extra_secret_of_six_characters_is_hidden_in_a_six_character_string() -> None:
    assert redact("Hj3kL0", extra=["Hj3kL0"]) == REDACTED
    assert redact("ab Hj3kL0", extra=["Hj3kL0"]) == f"ab {REDACTED}"


def test_a_longer_secret_holding_a_shorter_one_is_hidden_whole() -> None:
    # Replaced longest first: the short one first would leave "Ab3***X" showing part of the long one.
    short, long = "zz9Qk7w2", "Ab3zz9Qk7w2X"
    register_secrets([short, long, "cursor", 17])  # type: ignore[list-item]
    assert redact(f"k {long} and {short}") == f"k {REDACTED} and {REDACTED}"
    assert redact("cursor") == "cursor"


def test_the_credentials_of_an_environment_are_every_one_in_order() -> None:
    env = {
        "EMPTY": "",
        "OPENAI_API_KEY": "Kx9abc123def",
        "HOME": "/root",
        "DATABASE_URL": "postgres://u:pw1:2x@h/db",
        "NOTE": "see ghp_abcdefgh1234 and https://h/?page=2&api_key=Zz9q",
    }
    # The userinfo, the password (with its colon), a token by shape, a query parameter by name.
    assert secret_values(env) == ["Kx9abc123def", "u:pw1:2x", "pw1:2x", "ghp_abcdefgh1234", "Zz9q"]


def test_the_credentials_of_two_urls_in_one_value_are_all_found() -> None:
    assert secrets_in("a://x:p1@h b://y:p2@h") == ["x:p1", "p1", "y:p2", "p2"]


def test_in_an_argument_list_only_a_secret_flag_hides_the_next_argument() -> None:
    assert secrets_in(["--api-key", "Abc123456"]) == ["Abc123456"]
    assert secrets_in(["-v", "plainvalue"]) == []
    assert secrets_in(["api-key", "Val123456"]) == []
    # A flag with its value after "=" does not take the next argument too.
    assert secrets_in(["--password=hunter22x", "next-arg"]) == ["hunter22x"]


def test_a_token_shaped_value_is_one_piece_with_letters_and_digits_and_no_path() -> None:
    assert looks_like_token("abcdefghij0123456789")
    assert not looks_like_token("~/abcdefghij0123456789")
    assert not looks_like_token("/abcdefghij0123456789")
    assert not looks_like_token("abcdefghijklmnopqrstu")  # no digit
    assert not looks_like_token("012345678901234567890")  # no letter
    assert not looks_like_token("abcdefghij 0123456789")
    assert not looks_like_token("abcdefghij012345678")  # 19 characters


def test_a_jwt_is_hidden_whole_and_a_prefixed_token_keeps_its_prefix() -> None:
    assert redact("a eyJhbGciOi.eyJzdWIiOi.sig123 b") == f"a {REDACTED} b"
    assert redact("k ghp_abcdefgh1234 z") == f"k ghp_{REDACTED} z"


def test_a_url_password_is_hidden_and_the_url_kept() -> None:
    assert redact("see https://u:pw99@h/x") == f"see https://{REDACTED}@h/x"


def test_long_flags_are_judged_by_name_and_single_dash_ones_by_length() -> None:
    assert is_secret_flag("-k")
    assert is_secret_flag("-key")
    assert is_secret_flag("--token")
    assert not is_secret_flag("--k")  # a long flag named "k" is no key flag
    assert not is_secret_flag("-K")
    assert not is_secret_flag("-x")
    assert not is_secret_flag("token")


def test_a_jvm_style_option_that_only_ends_in_a_credential_word_takes_no_credential() -> None:
    # "-Xpass" is not "-pass": only dashes are stripped to read a flag's name.
    assert not is_secret_flag("-Xpass")
    assert not is_secret_flag("--XXauth")
    assert redact(["-Xpass", "build.gradle"]) == ["-Xpass", "build.gradle"]


def test_every_credential_in_one_text_is_found_in_order() -> None:
    # A secret flag after a named value, a named value after a secret flag: neither hides the other.
    assert secrets_in("OPENAI_API_KEY=Kx9abc123 --token Tz8def456") == ["Kx9abc123", "Tz8def456"]
    assert secrets_in("--token Tz8def456 PGPASSWORD=Pw7ghi890") == ["Tz8def456", "Pw7ghi890"]
    # A plain name whose value holds a credential, after another credential.
    assert secrets_in("GITHUB_TOKEN=Gh12345678 endpoint=https://h/?sig=Sg12345678") == [
        "Gh12345678",
        "Sg12345678",
    ]


def test_the_value_of_a_plain_flag_is_no_credential_unless_it_holds_one() -> None:
    assert secrets_in("run --config Cfg12345") == []
    assert secrets_in("run --url https://h/x?token=Tk12345678") == ["Tk12345678"]
    assert redact("run --url https://h/x?token=Tk12345678") == f"run --url https://h/x?token={REDACTED}"


def test_a_named_credential_is_found_as_its_value() -> None:
    assert secrets_in("PGPASSWORD=pw12345x") == ["pw12345x"]


def test_only_the_credential_query_parameter_of_a_url_is_hidden() -> None:
    assert redact("GET /x?page=2&sig=Sg12345678") == f"GET /x?page=2&sig={REDACTED}"
    assert redact("GET https://h/x?page=2&sig=Sg12345678") == f"GET https://h/x?page=2&sig={REDACTED}"


def test_in_an_argument_list_only_a_secret_flag_hides_the_next_argument_as_redact_sees_it() -> None:
    assert redact(["-v", "report.txt"]) == ["-v", "report.txt"]
    assert redact(["--output", "Val123456"]) == ["--output", "Val123456"]
    assert redact(["--token", "Val123456", "next"]) == ["--token", REDACTED, "next"]


def test_a_passphrase_with_spaces_in_one_flag_argument_is_hidden_whole() -> None:
    assert redact(["--password=pass phrase=with equals"]) == [f"--password={REDACTED}"]
    assert redact(["--token=two words"]) == [f"--token={REDACTED}"]


def test_a_value_after_a_secret_flag_that_is_no_string_keeps_its_shape_and_is_redacted() -> None:
    # Redaction keeps the structure it is given: a number stays a number, a list a list.
    assert redact(["-k", 42]) == ["-k", 42]
    nested = ["run", "Xy12345678abc"]
    assert redact(["--token", nested], extra=["Xy12345678abc"]) == ["--token", ["run", REDACTED]]


def test_a_plain_flag_with_its_value_after_an_equals_sign_is_shown() -> None:
    assert redact(["--output=report.txt", "-o=x.json"]) == ["--output=report.txt", "-o=x.json"]


def test_a_usage_text_naming_every_credential_word_still_hides_the_credential_in_it() -> None:
    usage = (
        "flags: --api-key, --token, --secret, --password, --pwd, --auth, --credential, --cookie, --sig,"
        " --pat, -k, bearer, basic; example: api_key=Kx9abc12345"
    )
    assert redact(usage) == usage.replace("Kx9abc12345", REDACTED)

"""Console logins, I/O-free (kvmesh.agent.ui_session): one-time tickets, signed sessions that
survive a restart, CSRF tokens."""

from __future__ import annotations

from kvmesh.agent.ui_session import (
    COOKIE,
    TICKET_TTL_S,
    Sessions,
    cookie_from,
    session_key,
    set_cookie,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_ticket_opens_one_session_once_and_only_within_60_s() -> None:
    clock = Clock()
    sessions = Sessions(session_key(["op-token", "rd-token"]), clock)
    ticket = sessions.issue_ticket("reader", "reader token")
    session = sessions.redeem(ticket)
    assert session is not None and session.role == "reader"
    assert sessions.redeem(ticket) is None  # one use
    late = sessions.issue_ticket("operator", "operator token")
    clock.now += TICKET_TTL_S + 0.1
    assert sessions.redeem(late) is None
    assert sessions.redeem("made-up") is None


def test_sessions_are_signed_expire_and_survive_a_restart_with_the_same_tokens() -> None:
    clock = Clock()
    sessions = Sessions(session_key(["op-token"]), clock, session_ttl_s=100)
    session = sessions.open("reader", "reader token")
    value = sessions.cookie_value(session)
    assert sessions.verify(value) == session
    # Another agent process with the same tokens: the same key, the session holds.
    assert Sessions(session_key(["op-token"]), clock).verify(value) == session
    assert Sessions(session_key(["rotated"]), clock).verify(value) is None
    # A reader cannot make itself an operator: the body is signed.
    _body, mac = value.split(".")
    forged = sessions.cookie_value(sessions.open("operator", "x")).split(".")[0]
    assert sessions.verify(f"{forged}.{mac}") is None
    assert sessions.verify(value + "x") is None and sessions.verify("junk") is None
    clock.now += 101
    assert sessions.verify(value) is None
    fresh = sessions.open("operator", "op")
    sessions.close(fresh)  # logged out
    assert sessions.verify(sessions.cookie_value(fresh)) is None


def test_csrf_token_belongs_to_its_session() -> None:
    sessions = Sessions(session_key(["t"]))
    one, two = sessions.open("operator", "a"), sessions.open("operator", "b")
    assert sessions.csrf_ok(one, sessions.csrf_token(one))
    assert not sessions.csrf_ok(one, sessions.csrf_token(two))
    assert not sessions.csrf_ok(one, None) and not sessions.csrf_ok(one, "")


def test_cookie_attributes() -> None:
    header = set_cookie("v", 60, secure=True)
    assert header.startswith(f"{COOKIE}=v;")
    for attribute in ("HttpOnly", "SameSite=Strict", "Secure", "Max-Age=60", "Path=/"):
        assert attribute in header
    assert "Secure" not in set_cookie("v", 60, secure=False)
    assert cookie_from(f"a=b; {COOKIE}=xyz; c=d") == "xyz"
    assert cookie_from("a=b") is None and cookie_from(None) is None

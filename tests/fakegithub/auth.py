"""Who is calling: a token from the Authorization header, or a GitHub App's signed JWT."""

from __future__ import annotations

import time
from typing import Any

import jwt

from .exchange import Problem
from .state import App, State, Token, now

# Endpoints GitHub only serves to an app authenticated with its JWT, never to a token.
JWT_OPERATIONS = frozenset({"apps/get-repo-installation", "apps/create-installation-access-token"})
# GitHub refuses JWTs that live longer than ten minutes; a little slack absorbs the test's own clock.
MAX_JWT_LIFETIME_S = 600
CLOCK_SKEW_S = 60


def _credential(header: str | None) -> str:
    if not header:
        raise Problem(401, "Requires authentication")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() not in ("token", "bearer") or not value.strip():
        raise Problem(401, "Bad credentials")
    return value.strip()


def token_for(state: State, header: str | None) -> Token:
    """The known, unexpired token the header carries; 401 otherwise, as GitHub answers."""
    record = state.tokens.get(_credential(header))
    if record is None or (record.expires_at is not None and record.expires_at <= now()):
        raise Problem(401, "Bad credentials")
    return record


def _app_claiming(state: State, claims: dict[str, Any]) -> App:
    # GitHub accepts the app id as a number or as a string in `iss`.
    for app in state.apps.values():
        if str(claims.get("iss")) == str(app.id):
            return app
    raise Problem(401, "Integration not found")


def _check_times(claims: dict[str, Any]) -> None:
    issued, expires, current = claims.get("iat"), claims.get("exp"), time.time()
    if not isinstance(issued, int) or issued > current + CLOCK_SKEW_S:
        raise Problem(
            401,
            "'Issued at' claim ('iat') must be an Integer representing the time "
            "that the assertion was issued",
        )
    if not isinstance(expires, int) or expires <= current:
        raise Problem(
            401,
            "'Expiration time' claim ('exp') must be a numeric value representing the future time "
            "at which the assertion expires",
        )
    if expires - current > MAX_JWT_LIFETIME_S + CLOCK_SKEW_S:
        raise Problem(401, "'Expiration time' claim ('exp') is too far in the future")


def app_for(state: State, header: str | None) -> App:
    """The app whose private key signed the bearer JWT (RS256), with GitHub's limits on its lifetime."""
    encoded = _credential(header)
    undecodable = Problem(401, "A JSON web token could not be decoded")
    try:
        app = _app_claiming(state, jwt.decode(encoded, options={"verify_signature": False}))
        # Times are checked below with GitHub's rules and messages, not pyjwt's.
        claims = jwt.decode(
            encoded,
            app.public_key,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_iss": False},
        )
    except jwt.PyJWTError:
        raise undecodable from None
    _check_times(claims)
    return app

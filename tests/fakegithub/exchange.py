"""One request as the route handlers see it, their reply, and the pagination GitHub applies to lists."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .shapes import Shapes, error_body
from .state import App, Repo, State, Token

T = TypeVar("T")

DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


@dataclass
class Reply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class Problem(Exception):
    """An HTTP error answer; raised from deep inside a handler, turned into a Reply by the server."""

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(f"{status} {message}")
        self.reply = Reply(status, error_body(message, status, errors))


def not_found() -> Problem:
    return Problem(404, "Not Found")


def invalid(resource: str, field_name: str, message: str, code: str = "invalid") -> Problem:
    """GitHub's 422 for a body that is well-formed JSON but breaks one of the endpoint's rules."""
    error = {"resource": resource, "code": code, "field": field_name, "message": message}
    return Problem(422, "Validation Failed", [error])


@dataclass
class Call:
    """A request that passed authentication and request-body validation."""

    operation_id: str
    method: str
    path: str
    query: dict[str, str]
    body: Any
    params: dict[str, str]
    state: State
    shapes: Shapes
    token: Token | None = None
    # Set instead of `token` on the endpoints a GitHub App reaches with its JWT.
    app: App | None = None

    @property
    def api(self) -> str:
        return self.shapes.api

    def json_body(self) -> dict[str, Any]:
        return self.body if isinstance(self.body, dict) else {}

    def int_param(self, name: str) -> int:
        try:
            return int(self.params[name])
        except ValueError:
            raise not_found() from None

    def repo(self) -> Repo:
        """The repository in the path, as the caller may see it: 404 also when the token cannot reach it."""
        full_name = f"{self.params['owner']}/{self.params['repo']}"
        repo = self.state.repos.get(full_name.lower())
        if repo is None:
            raise not_found()
        if (
            self.token is not None
            and self.token.repos is not None
            and repo.full_name.lower() not in self.token.repos
        ):
            raise not_found()
        return repo


def _positive_int(raw: str | None, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return value if value > 0 else default


def _page_url(call: Call, page: int, per_page: int) -> str:
    query = {**call.query, "per_page": str(per_page), "page": str(page)}
    return f"{call.api}{call.path}?{urllib.parse.urlencode(query)}"


def _link_header(call: Call, page: int, last: int, per_page: int) -> str | None:
    """GitHub's order: prev, next, last, first; each relation only where it leads somewhere else."""
    links = []
    if page > 1:
        links.append((page - 1, "prev"))
    if page < last:
        links += [(page + 1, "next"), (last, "last")]
    if page > 1:
        links.append((1, "first"))
    return ", ".join(f'<{_page_url(call, number, per_page)}>; rel="{rel}"' for number, rel in links) or None


def paginate(call: Call, items: Sequence[T]) -> tuple[list[T], dict[str, str]]:
    """The requested page of `items` and the Link header that leads through the rest."""
    per_page = min(_positive_int(call.query.get("per_page"), DEFAULT_PER_PAGE), MAX_PER_PAGE)
    page = _positive_int(call.query.get("page"), 1)
    last = max(1, -(-len(items) // per_page))
    link = _link_header(call, page, last, per_page)
    return list(items[(page - 1) * per_page : page * per_page]), {"Link": link} if link else {}

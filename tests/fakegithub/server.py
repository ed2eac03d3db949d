"""FakeGitHub: a local GitHub REST server over real HTTP, checked against GitHub's OpenAPI description."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from traceback import format_exc
from types import TracebackType
from typing import Any, Literal

from cryptography.hazmat.primitives import serialization

from . import app_routes, check_routes, repo_routes
from .auth import JWT_OPERATIONS, app_for, token_for
from .exchange import Call, Problem, Reply, not_found
from .faults import Fault, fault_reply, make_fault
from .shapes import Shapes
from .spec import Match, Spec, load
from .state import App, Installation, Pull, PullCommit, State, Token

ROUTES: dict[str, Callable[[Call], Reply]] = {
    **repo_routes.ROUTES,
    **check_routes.ROUTES,
    **app_routes.ROUTES,
}
RATE_LIMIT = 5000
# Idle keep-alive connections give their thread back after this long.
IDLE_TIMEOUT_S = 10


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    # The HTTP status sent, or "dropped" when the connection was closed without an answer.
    status: int | Literal["dropped"]
    headers: dict[str, str]
    # GitHub's operationId for the route, e.g. "issues/create-comment"; None when it is no GitHub route.
    operation_id: str | None


@dataclass(frozen=True)
class Incoming:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw_body: bytes

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers.items() if key.lower() == name.lower()), None)


@dataclass(frozen=True)
class Outgoing:
    status: int
    headers: list[tuple[str, str]]
    payload: bytes


def _request_id() -> str:
    """Shaped like GitHub's X-GitHub-Request-Id, e.g. `C3A4:2B1F:1A2B3C:2D4E5F:6650A1B2`."""
    sizes = (2, 2, 3, 3, 4)
    return ":".join(secrets.token_hex(size).upper() for size in sizes)


def _lenient_json(raw: bytes) -> Any:
    """The body as recorded: parsed when it is JSON, else None (the violation is reported elsewhere)."""
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return None


def _credential_or_empty(header: str | None) -> str:
    return (header or "").strip().partition(" ")[2].strip()


def _public_key(key: Any) -> Any:
    """Accept a PEM (public or private) or a cryptography key object; keep only the public half."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(key, bytes):
        if b"PRIVATE KEY" in key:
            return serialization.load_pem_private_key(key, password=None).public_key()
        return serialization.load_pem_public_key(key)
    return key.public_key() if hasattr(key, "public_key") else key


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 makes a burst of parallel connects wait a SYN retry (1 s).
    request_queue_size = 128
    fake: FakeGitHub


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    # Headers and body leave in two writes; with Nagle on, the body would wait for a delayed ACK (~40 ms).
    disable_nagle_algorithm = True
    server: _Server

    def version_string(self) -> str:
        return "github.com"

    def log_message(self, format: str, *args: Any) -> None:
        # Tests read FakeGitHub.requests; per-request stderr lines would only bury pytest's output.
        return

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        split = urllib.parse.urlsplit(self.path)
        query = {key: values[-1] for key, values in urllib.parse.parse_qs(split.query, True).items()}
        incoming = Incoming(self.command.upper(), split.path, query, dict(self.headers.items()), raw)
        outgoing = self.server.fake.handle(incoming)
        if outgoing is None:
            self.close_connection = True
            return
        self.send_response(outgoing.status)
        for name, value in outgoing.headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(outgoing.payload)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve


class FakeGitHub:
    """GitHub's REST API for the endpoints perfcheck uses; see the package docstring for what is faithful."""

    def __init__(self, spec_path: Path | None = None) -> None:
        self.spec: Spec = load(spec_path)
        self.state = State()
        self.requests: list[RecordedRequest] = []
        self.violations: list[str] = []
        self._faults: list[Fault] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._shapes: Shapes | None = None
        self.url = ""

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        if self._server is not None:
            return self
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._shapes = Shapes(self.spec, self.state, self.url)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-github", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join()
        self._server, self._thread = None, None

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def shapes(self) -> Shapes:
        if self._shapes is None:
            raise RuntimeError("FakeGitHub is not started: use it as a context manager or call start()")
        return self._shapes

    # -- seeding -------------------------------------------------------------------------------

    def add_repo(self, full_name: str, default_branch: str = "main", *, private: bool = False) -> None:
        self.state.add_repo(full_name, default_branch, private)

    def add_user(self, login: str, user_type: str = "User") -> None:
        """Make a login exist on GitHub (users met through other seeds exist already)."""
        self.state.user(login, user_type)

    def add_token(
        self, token: str, login: str = "perfcheck-bot", kind: Literal["app", "user"] = "app"
    ) -> None:
        """A token that acts as `login`; an "app" token acts as a Bot user and may write check runs."""
        self.state.add_token(token, login, kind)

    def add_pull(
        self,
        repo: str,
        number: int,
        *,
        head_sha: str,
        base_sha: str,
        head_repo: str | None = None,
        files: Sequence[str | dict[str, Any]] = (),
        user: str = "octocat",
        draft: bool = False,
        state: str = "open",
        changed_files: int | None = None,
        title: str | None = None,
        head_ref: str = "topic",
        commits: Sequence[PullCommit] = (),
    ) -> None:
        """A pull request (and the issue it also is). `files` entries are names or diff-entry overrides;
        `commits` what its commits list gives, oldest first."""
        self.state.add_pull(
            repo,
            number,
            head_sha=head_sha,
            base_sha=base_sha,
            head_repo=head_repo,
            files=files,
            user=user,
            draft=draft,
            state=state,
            changed_files=changed_files,
            title=title,
            head_ref=head_ref,
            commits=commits,
        )

    def add_issue(self, repo: str, number: int, *, title: str = "An issue", user: str = "octocat") -> None:
        self.state.add_issue(repo, number, title=title, user=user)

    def add_commit(self, repo: str, sha: str, message: str = "Commit") -> None:
        """A commit check runs may point at (the head and base of every seeded pull are known already)."""
        self.state.add_commit(repo, sha, message)

    def push(self, repo: str, number: int, sha: str) -> None:
        """A new head commit on pull request `number` (what a push to its branch does)."""
        with self.state.lock:
            pull = self.state.issue(repo, number)
            if not isinstance(pull, Pull):
                raise KeyError(f"no pull request #{number} in {repo}: seed it first")
            pull.head_sha = sha
            self.state.add_commit(repo, sha, f"Commit {sha[:7]}")

    def backdate(self, seconds: float) -> None:
        """Move every timestamp already given out `seconds` into the past, so that what happens
        next is later by GitHub's (one-second) clock."""
        delta = timedelta(seconds=seconds)
        with self.state.lock:
            for comment in self.state.comments.values():
                comment.created_at -= delta
                comment.updated_at -= delta
            for run in self.state.check_runs.values():
                run.started_at -= delta
                if run.completed_at is not None:
                    run.completed_at -= delta

    def set_permission(self, repo: str, login: str, permission: str) -> None:
        self.state.set_permission(repo, login, permission)

    def add_workflow(
        self, repo: str, file_name: str, name: str | None = None, inputs: Sequence[str] | None = None
    ) -> int:
        """A workflow reachable by file name or by the returned id; `inputs` bounds what a dispatch passes."""
        return self.state.add_workflow(repo, file_name, name, inputs).id

    def add_app(self, app_id: int, public_key: Any, slug: str = "perfcheck", owner: str = "octocat") -> None:
        with self.state.lock:
            self.state.apps[app_id] = App(app_id, slug, _public_key(public_key), self.state.user(owner))

    def add_installation(
        self, installation_id: int, app_id: int, repos: Sequence[str] = (), account: str | None = None
    ) -> None:
        """An installation of the app on `repos` (full names); no repos means all of `account`'s."""
        if not repos and account is None:
            raise ValueError("an installation needs repos or an account")
        with self.state.lock:
            if app_id not in self.state.apps:
                raise KeyError(f"unknown app {app_id}: seed it with add_app first")
            owner = self.state.user(account or repos[0].partition("/")[0])
            names = [self.state.repo(name).full_name for name in repos]
            self.state.installations[installation_id] = Installation(
                installation_id, self.state.apps[app_id], owner, names
            )

    def add_comment(
        self, repo: str, number: int, body: str, user: str = "someone", user_type: str = "User"
    ) -> dict[str, Any]:
        with self.state.lock:
            issue = self.state.issue(repo, number)
            if issue is None:
                raise KeyError(f"no issue or pull request #{number} in {repo}: seed it first")
            comment = self.state.add_comment(issue, body, self.state.user(user, user_type))
            return self.shapes.comment(comment)

    # -- inspection ----------------------------------------------------------------------------

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        with self.state.lock:
            issue = self.state.issue(repo, number)
            found = self.state.comments_on(issue) if issue is not None else []
            return [self.shapes.comment(comment) for comment in sorted(found, key=lambda c: c.id)]

    def check_runs(self, repo: str, head_sha: str | None = None) -> list[dict[str, Any]]:
        with self.state.lock:
            target = self.state.repo(repo)
            runs = [r for r in self.state.check_runs.values() if r.repo is target]
            runs = [r for r in runs if head_sha in (None, r.head_sha)]
            return [self.shapes.check_run(run) for run in sorted(runs, key=lambda r: r.id)]

    def annotations(self, repo: str, check_run_id: int) -> list[dict[str, Any]]:
        with self.state.lock:
            run = self.state.check_runs[check_run_id]
            if run.repo is not self.state.repo(repo):
                raise KeyError(f"check run {check_run_id} is not in {repo}")
            return [self.shapes.annotation(run, annotation) for annotation in run.annotations]

    def reactions(self, repo: str, comment_id: int) -> list[dict[str, Any]]:
        with self.state.lock:
            comment = self.state.comments.get(comment_id)
            if comment is None or comment.issue.repo is not self.state.repo(repo):
                return []
            mine = [r for r in self.state.reactions if r.comment_id == comment_id]
            return [self.shapes.reaction(reaction) for reaction in mine]

    def dispatches(self, repo: str) -> list[dict[str, Any]]:
        with self.state.lock:
            target = self.state.repo(repo)
            return [
                {
                    "workflow": d.workflow.file_name,
                    "workflow_id": d.workflow.id,
                    "ref": d.ref,
                    "inputs": d.inputs,
                    "actor": d.actor,
                }
                for d in self.state.dispatches
                if d.workflow.repo is target
            ]

    # -- faults --------------------------------------------------------------------------------

    def inject(
        self,
        method: str,
        path_regex: str,
        kind: str,
        *,
        times: int = 1,
        after_effect: bool = False,
        retry_after: int = 1,
    ) -> None:
        """Answer the next `times` requests matching (method or "*", regex searched in the path) with a fault.

        kinds: "502", "rate_limit" (403 secondary rate limit), "429", "drop" (close without answering).
        `after_effect` (502 and drop only) applies the request to the state first, as when GitHub acted but
        the answer never arrived.
        """
        fault = make_fault(method, path_regex, kind, times, after_effect, retry_after)
        with self.state.lock:
            self._faults.append(fault)

    # -- request handling ----------------------------------------------------------------------

    def handle(self, incoming: Incoming) -> Outgoing | None:
        """One HTTP exchange: None means the connection is to be closed without an answer."""
        request_id = _request_id()
        with self.state.lock:
            match = self.spec.find(incoming.method, incoming.path)
            fault = next((f for f in self._faults if f.matches(incoming.method, incoming.path)), None)
            reply: Reply | None = None
            if fault is None or fault.after_effect:
                reply = self._respond_safely(incoming, match)
            if fault is not None:
                fault.remaining -= 1
                reply = fault_reply(fault, request_id)
            outgoing = None if reply is None else self._outgoing(incoming, reply, request_id)
            self.requests.append(
                RecordedRequest(
                    incoming.method,
                    incoming.path,
                    incoming.query,
                    _lenient_json(incoming.raw_body),
                    "dropped" if outgoing is None else outgoing.status,
                    incoming.headers,
                    match.operation.operation_id if match is not None else None,
                )
            )
            return outgoing

    def _respond_safely(self, incoming: Incoming, match: Match | None) -> Reply:
        try:
            return self._respond(incoming, match)
        except Exception:
            # A bug in the fake must fail the test with its traceback, not look like a network failure.
            self.violations.append(
                f"FakeGitHub crashed on {incoming.method} {incoming.path}:\n{format_exc()}"
            )
            return Reply(500, {"message": "Server Error"})

    def _respond(self, incoming: Incoming, match: Match | None) -> Reply:
        """Authenticate, validate and run one request; every outcome is a reply."""
        if match is None:
            self.violations.append(
                f"{incoming.method} {incoming.path}: no such operation in GitHub's REST API"
            )
            return not_found().reply
        operation = match.operation
        try:
            token, app = self._authenticate(incoming, operation.operation_id)
            body = self._parse_body(incoming)
            self._check_request(match, body)
            call = Call(
                operation.operation_id,
                incoming.method,
                incoming.path,
                incoming.query,
                body,
                match.params,
                self.state,
                self.shapes,
                token,
                app,
            )
            reply = self._route(call)
        except Problem as problem:
            reply = problem.reply
        self._check_reply(match, reply)
        return reply

    def _parse_body(self, incoming: Incoming) -> Any:
        if not incoming.raw_body.strip():
            return None
        try:
            return json.loads(incoming.raw_body)
        except ValueError:
            self.violations.append(f"{incoming.method} {incoming.path}: request body is not JSON")
            raise Problem(400, "Problems parsing JSON") from None

    def _authenticate(self, incoming: Incoming, operation_id: str) -> tuple[Token | None, App | None]:
        """Before anything else, as GitHub does: an unauthenticated request learns nothing about its body."""
        authorization = incoming.header("Authorization")
        if operation_id in JWT_OPERATIONS:
            return None, app_for(self.state, authorization)
        token = token_for(self.state, authorization)
        # GET /rate_limit is free on GitHub; everything else a token does counts against its limit.
        if operation_id != "rate-limit/get":
            token.used += 1
        return token, None

    def _check_request(self, match: Match, body: Any) -> None:
        errors = self.spec.validate_request(match.operation, body)
        if errors:
            self.violations.extend(errors)
            details = [{"resource": "Request", "code": "invalid", "message": error} for error in errors]
            raise Problem(422, "Invalid request.", details)

    def _route(self, call: Call) -> Reply:
        handler = ROUTES.get(call.operation_id)
        if handler is None:
            self.violations.append(
                f"{call.method} {call.path}: {call.operation_id} is GitHub's, but FakeGitHub lacks it"
            )
            raise not_found()
        return handler(call)

    def _check_reply(self, match: Match, reply: Reply) -> None:
        """The server's own answers must match the description too: a shape mistake here is a bug."""
        operation, status = match.operation, reply.status
        success = 200 <= status < 300
        if success and not self.spec.declares(operation, status):
            where = f"{operation.method.upper()} {operation.template}"
            self.violations.append(f"{where}: answered {status}, which the description does not list")
        # A success without a body is checked too: where the description promises JSON, None fails it.
        if reply.body is not None or success:
            self.violations.extend(self.spec.validate_response(operation, status, reply.body))

    def _rate_headers(self, incoming: Incoming) -> list[tuple[str, str]]:
        # Faults and refusals carry the caller's real numbers too: a client must not read them as exhausted.
        token = self.state.tokens.get(_credential_or_empty(incoming.header("Authorization")))
        limit, used = (RATE_LIMIT, token.used) if token is not None else (60, 0)
        return [
            ("X-RateLimit-Limit", str(limit)),
            ("X-RateLimit-Remaining", str(limit - used)),
            ("X-RateLimit-Reset", str(self.state.rate_reset)),
            ("X-RateLimit-Used", str(used)),
            ("X-RateLimit-Resource", "core"),
        ]

    def _outgoing(self, incoming: Incoming, reply: Reply, request_id: str) -> Outgoing:
        payload = b"" if reply.body is None else json.dumps(reply.body).encode()
        headers = [
            ("X-GitHub-Request-Id", request_id),
            ("X-GitHub-Media-Type", "github.v3; format=json"),
            ("X-GitHub-Api-Version-Selected", "2022-11-28"),
            *self._rate_headers(incoming),
            *reply.headers.items(),
        ]
        status = reply.status
        if incoming.method == "GET" and status == 200:
            etag = f'W/"{hashlib.sha256(payload).hexdigest()[:32]}"'
            headers.append(("ETag", etag))
            if incoming.header("If-None-Match") == etag:
                status, payload = 304, b""
        if payload:
            headers.append(("Content-Type", "application/json; charset=utf-8"))
        if status not in (204, 304):
            headers.append(("Content-Length", str(len(payload))))
        return Outgoing(status, headers, payload)

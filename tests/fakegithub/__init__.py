"""A local GitHub REST server for tests, checked against GitHub's own API description.

Faithful (and checked on every request):
- Routing follows GitHub's OpenAPI description (@octokit/openapi 23.0.2): a method and path that is not an
  operation there is a violation and answers 404; so is a real operation the fake does not implement.
- Request bodies are validated against the operation's request schema; an invalid one is a violation and
  answers GitHub's 422 "Invalid request.".
- Every body the server builds starts from the description's own examples and is validated against the
  response schema for its status, so a shape mistake in the fake shows up as a violation as well.
- Rules GitHub enforces beyond the schema: comment bodies up to 65536 characters; at most 50 check-run
  annotations per request, accumulating across requests; `conclusion` required to complete a check run and
  implying completion; output title and summary required; only GitHub Apps write check runs (and only the
  app that created one may edit it); pull request files listed up to 3000 whatever `changed_files` says;
  a repeated reaction answers 200 with the existing one; `check_run.pull_requests` omits pull requests from
  forks; installation tokens reach only their installation's repositories (others are 404); App JWTs are
  verified (RS256 with the app's key, `iss`, `iat`, `exp` at most ten minutes ahead).
- Pagination (per_page up to 100, page) with GitHub's Link header; rate-limit and request-id headers.
- Collaborator permission: GitHub answers for anyone who exists, collaborator or not. A non-collaborator
  gets "read" on a public repository and "none" on a private one; a login GitHub has never seen gets 404.

Simplified:
- Every request must authenticate (GitHub also serves public reads anonymously).
- Git data is minimal: commits are known by full SHA only (the heads and bases of seeded pulls, or
  add_commit), with no files, parents or branch names; check runs are looked up by SHA, not by branch.
- A workflow dispatch checks the workflow exists and, when seeded with `inputs`, the input names; the ref
  is not checked. Tokens' permissions are reported but not enforced. Issue comments ignore reactions rollups.
- Every account is a User (no organisations, teams or custom roles); a fork has no `parent`/`source`.
- An output on a check-run PATCH needs title and summary, as on create (the description's PATCH schema
  marks neither required; GitHub's docs call title required).
- No conditional requests beyond If-None-Match on GET, no GraphQL, no webhooks.

Use the `fake_github` fixture from fakegithub.fixtures (it fails the test on any violation; a test that
provokes one on purpose checks and clears `fake.violations`), or FakeGitHub as a context manager.
"""

from .server import FakeGitHub, RecordedRequest
from .spec import SETUP_HINT, SpecMissingError

__all__ = ["SETUP_HINT", "FakeGitHub", "RecordedRequest", "SpecMissingError"]

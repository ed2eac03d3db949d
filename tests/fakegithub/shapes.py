"""JSON bodies shaped like GitHub's, built from the OpenAPI description's own examples.

Each builder deep-copies a `components/examples` entry, points its URLs at the fake server, and overwrites
the fields the state decides. Starting from GitHub's example keeps the dozens of fields nobody seeds
(`forks_count`, `*_url` templates, `_links`) present and realistic; the server validates every body it builds
against the response schema, so a field the example lacks or a wrong override shows up as a violation.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Sequence
from typing import Any

from .spec import Spec
from .state import (
    LEGACY_PERMISSION,
    App,
    CheckRun,
    Comment,
    Installation,
    Issue,
    Pull,
    Reaction,
    Repo,
    State,
    Token,
    User,
    Workflow,
    iso,
    node_id,
)

EXAMPLE_API = "https://api.github.com"
WEB = "https://github.com"
DOCS = "https://docs.github.com/rest"
# Booleans GitHub reports per role in a collaborator's `permissions`.
ROLE_GRANTS = {
    "admin": ("admin", "maintain", "push", "triage", "pull"),
    "maintain": ("maintain", "push", "triage", "pull"),
    "write": ("push", "triage", "pull"),
    "triage": ("triage", "pull"),
    "read": ("pull",),
    "none": (),
}
INSTALLATION_PERMISSIONS = {
    "actions": "write",
    "checks": "write",
    "contents": "read",
    "issues": "write",
    "metadata": "read",
    "pull_requests": "write",
}


def _rebase(value: Any, replacements: dict[str, str]) -> Any:
    """Every string in `value` with the example's host and names swapped for the fake's."""
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_rebase(item, replacements) for item in value]
    if isinstance(value, dict):
        return {key: _rebase(item, replacements) for key, item in value.items()}
    return value


def _blob_sha(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


def error_body(message: str, status: int, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS, "status": str(status)}
    if errors is not None:
        body["errors"] = errors
    return body


class Shapes:
    def __init__(self, spec: Spec, state: State, base_url: str) -> None:
        self.spec = spec
        self.state = state
        self.api = base_url

    def _example(self, name: str, full_name: str | None = None) -> dict[str, Any]:
        """The named example pointed at the fake; of a list example (`*-items`), its first entry."""
        replacements = {EXAMPLE_API: self.api}
        if full_name is not None:
            # Examples use one of a few demo repositories; their URLs all follow /repos/<full name>/.
            for demo in ("octocat/Hello-World", "github/hello-world", "octo-org/octo-repo"):
                replacements[f"/{demo}/"] = f"/{full_name}/"
                replacements[f"/{demo}#"] = f"/{full_name}#"
        example = _rebase(self.spec.example(name), replacements)
        entry: dict[str, Any] = example[0] if isinstance(example, list) else example
        return entry

    # -- users and repositories ----------------------------------------------------------------

    def user(self, user: User) -> dict[str, Any]:
        body: dict[str, Any] = self._example("issue-comment")["user"]
        # Bots live under /apps/<slug> on the web and are %-escaped in API URLs because of the brackets.
        path = urllib.parse.quote(user.login)
        api_user = f"{self.api}/users/{path}"
        html = f"{WEB}/apps/{user.login.removesuffix('[bot]')}" if user.type == "Bot" else f"{WEB}/{path}"
        body.update(
            login=user.login,
            id=user.id,
            node_id=node_id("Bot" if user.type == "Bot" else "User", user.id),
            avatar_url=f"https://avatars.githubusercontent.com/u/{user.id}?v=4",
            url=api_user,
            html_url=html,
            type=user.type,
            site_admin=False,
        )
        for key in ("followers", "subscriptions", "organizations", "repos", "received_events"):
            body[f"{key}_url"] = f"{api_user}/{key}"
        body["following_url"] = f"{api_user}/following{{/other_user}}"
        body["gists_url"] = f"{api_user}/gists{{/gist_id}}"
        body["starred_url"] = f"{api_user}/starred{{/owner}}{{/repo}}"
        body["events_url"] = f"{api_user}/events{{/privacy}}"
        return body

    def _repository(self, template: dict[str, Any], demo: str, repo: Repo) -> dict[str, Any]:
        body: dict[str, Any] = _rebase(template, {f"/{demo}": f"/{repo.full_name}", EXAMPLE_API: self.api})
        body.update(
            id=repo.id,
            node_id=node_id("Repository", repo.id),
            name=repo.name,
            full_name=repo.full_name,
            owner=self.user(repo.owner),
            private=repo.private,
            html_url=f"{WEB}/{repo.full_name}",
            description=None,
            fork=repo.fork,
            url=f"{self.api}/repos/{repo.full_name}",
            homepage=None,
            language="Python",
            default_branch=repo.default_branch,
            topics=[],
            created_at=iso(repo.created_at),
            updated_at=iso(repo.created_at),
            pushed_at=iso(repo.created_at),
            license=None,
        )
        if "visibility" in body:
            body["visibility"] = "private" if repo.private else "public"
        # Which of these GitHub sends depends on the caller and on forks/templates/organisations.
        for key in (
            "permissions",
            "template_repository",
            "organization",
            "parent",
            "source",
            "temp_clone_token",
        ):
            body.pop(key, None)
        return body

    def full_repository(self, repo: Repo) -> dict[str, Any]:
        template = self.spec.example("full-repository-default-response")
        return self._repository(template, "octocat/Hello-World", repo)

    def _pull_repository(self, repo: Repo) -> dict[str, Any]:
        return self._repository(
            self.spec.example("pull-request")["base"]["repo"], "octocat/Hello-World", repo
        )

    # -- issues and pull requests --------------------------------------------------------------

    def _association(self, repo: Repo, user: User) -> str:
        role = self.state.permission_of(repo, user)
        if user.login.lower() == repo.owner.login.lower():
            return "OWNER"
        return "COLLABORATOR" if role not in (None, "none") else "NONE"

    def _issue_fields(self, issue: Issue) -> dict[str, Any]:
        """Fields an issue and a pull request share, as GitHub sends them on both."""
        return {
            "id": issue.id,
            "number": issue.number,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user(issue.user),
            "body": issue.body,
            "labels": [],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.created_at),
            "closed_at": iso(issue.created_at) if issue.state == "closed" else None,
            "assignee": None,
            "assignees": [],
            "author_association": self._association(issue.repo, issue.user),
        }

    def issue(self, issue: Issue) -> dict[str, Any]:
        full = issue.repo.full_name
        body = self._example("issue", full)
        body.update(self._issue_fields(issue))
        kind = "pull" if isinstance(issue, Pull) else "issues"
        body.update(
            node_id=node_id("Issue", issue.id),
            url=f"{self.api}/repos/{full}/issues/{issue.number}",
            repository_url=f"{self.api}/repos/{full}",
            labels_url=f"{self.api}/repos/{full}/issues/{issue.number}/labels{{/name}}",
            comments_url=f"{self.api}/repos/{full}/issues/{issue.number}/comments",
            events_url=f"{self.api}/repos/{full}/issues/{issue.number}/events",
            html_url=f"{WEB}/{full}/{kind}/{issue.number}",
            comments=len(self.state.comments_on(issue)),
            closed_by=None,
            state_reason=None,
            pinned_comment=None,
        )
        body.pop("pull_request", None)
        if isinstance(issue, Pull):
            body["pull_request"] = {
                "url": f"{self.api}/repos/{full}/pulls/{issue.number}",
                "html_url": f"{WEB}/{full}/pull/{issue.number}",
                "diff_url": f"{WEB}/{full}/pull/{issue.number}.diff",
                "patch_url": f"{WEB}/{full}/pull/{issue.number}.patch",
                "merged_at": None,
            }
        return body

    def _branch(self, pull: Pull, side: str) -> dict[str, Any]:
        repo = (pull.head_repo or pull.repo) if side == "head" else pull.repo
        ref = pull.head_ref if side == "head" else pull.repo.default_branch
        return {
            "label": f"{repo.owner.login}:{ref}",
            "ref": ref,
            "sha": pull.head_sha if side == "head" else pull.base_sha,
            "user": self.user(repo.owner),
            "repo": self._pull_repository(repo),
        }

    def _pull_fields(self, pull: Pull) -> dict[str, Any]:
        full, number = pull.repo.full_name, pull.number
        api = f"{self.api}/repos/{full}"
        fields = self._issue_fields(pull)
        fields.update(
            url=f"{api}/pulls/{number}",
            id=pull.pull_id,
            node_id=node_id("PullRequest", pull.pull_id),
            html_url=f"{WEB}/{full}/pull/{number}",
            diff_url=f"{WEB}/{full}/pull/{number}.diff",
            patch_url=f"{WEB}/{full}/pull/{number}.patch",
            issue_url=f"{api}/issues/{number}",
            commits_url=f"{api}/pulls/{number}/commits",
            review_comments_url=f"{api}/pulls/{number}/comments",
            review_comment_url=f"{api}/pulls/comments{{/number}}",
            comments_url=f"{api}/issues/{number}/comments",
            statuses_url=f"{api}/statuses/{pull.head_sha}",
            merged_at=None,
            merge_commit_sha=None,
            requested_reviewers=[],
            requested_teams=[],
            head=self._branch(pull, "head"),
            base=self._branch(pull, "base"),
            auto_merge=None,
            draft=pull.draft,
        )
        fields["_links"] = {
            "self": {"href": f"{api}/pulls/{number}"},
            "html": {"href": f"{WEB}/{full}/pull/{number}"},
            "issue": {"href": f"{api}/issues/{number}"},
            "comments": {"href": f"{api}/issues/{number}/comments"},
            "review_comments": {"href": f"{api}/pulls/{number}/comments"},
            "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
            "commits": {"href": f"{api}/pulls/{number}/commits"},
            "statuses": {"href": f"{api}/statuses/{pull.head_sha}"},
        }
        return fields

    def pull(self, pull: Pull) -> dict[str, Any]:
        body = self._example("pull-request", pull.repo.full_name)
        body.update(self._pull_fields(pull))
        additions = sum(entry.get("additions", 1) for entry in pull.files)
        deletions = sum(entry.get("deletions", 0) for entry in pull.files)
        body.update(
            merged=False,
            mergeable=True,
            rebaseable=True,
            mergeable_state="clean",
            merged_by=None,
            comments=len(self.state.comments_on(pull)),
            review_comments=0,
            maintainer_can_modify=pull.head_repo is not None,
            commits=max(1, len(pull.commits)),
            additions=additions,
            deletions=deletions,
            changed_files=pull.changed_files,
        )
        return body

    def pull_simple(self, pull: Pull) -> dict[str, Any]:
        body = self._example("pull-request-simple-items", pull.repo.full_name)
        body.update(self._pull_fields(pull))
        return body

    def diff_entry(self, pull: Pull, entry: dict[str, Any]) -> dict[str, Any]:
        body = self._example("diff-entry-items", pull.repo.full_name)
        full, sha, name = pull.repo.full_name, pull.head_sha, entry["filename"]
        quoted = urllib.parse.quote(name)
        additions, deletions = entry.get("additions", 1), entry.get("deletions", 0)
        body.update(
            sha=_blob_sha(sha, name),
            filename=name,
            additions=additions,
            deletions=deletions,
            changes=additions + deletions,
            blob_url=f"{WEB}/{full}/blob/{sha}/{quoted}",
            raw_url=f"{WEB}/{full}/raw/{sha}/{quoted}",
            contents_url=f"{self.api}/repos/{full}/contents/{quoted}?ref={sha}",
            patch=f"@@ -1,{deletions} +1,{additions} @@",
        )
        body.update(entry)
        return body

    def commit(
        self,
        repo: Repo,
        sha: str,
        message: str,
        author: str = "Monalisa Octocat",
        parents: Sequence[str] = (),
    ) -> dict[str, Any]:
        body = self._example("commit", repo.full_name)
        api = f"{self.api}/repos/{repo.full_name}"
        signature = {"name": author, "email": "mona@github.com", "date": iso(repo.created_at)}
        body.update(
            url=f"{api}/commits/{sha}",
            sha=sha,
            node_id=node_id("Commit", int(_blob_sha(sha)[:8], 16)),
            html_url=f"{WEB}/{repo.full_name}/commit/{sha}",
            comments_url=f"{api}/commits/{sha}/comments",
            author=None,
            committer=None,
            parents=[
                {"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{WEB}/{repo.full_name}/commit/{p}"}
                for p in parents
            ],
            stats={"additions": 0, "deletions": 0, "total": 0},
            files=[],
        )
        body["commit"].update(
            url=f"{api}/git/commits/{sha}",
            author=signature,
            committer=dict(signature),
            message=message,
            tree={"url": f"{api}/git/trees/{_blob_sha('tree', sha)}", "sha": _blob_sha("tree", sha)},
        )
        return body

    # -- comments and reactions ----------------------------------------------------------------

    def comment(self, comment: Comment) -> dict[str, Any]:
        issue = comment.issue
        full = issue.repo.full_name
        body = self._example("issue-comment", full)
        kind = "pull" if isinstance(issue, Pull) else "issues"
        body.update(
            id=comment.id,
            node_id=node_id("IssueComment", comment.id),
            url=f"{self.api}/repos/{full}/issues/comments/{comment.id}",
            html_url=f"{WEB}/{full}/{kind}/{issue.number}#issuecomment-{comment.id}",
            body=comment.body,
            user=self.user(comment.user),
            created_at=iso(comment.created_at),
            updated_at=iso(comment.updated_at),
            issue_url=f"{self.api}/repos/{full}/issues/{issue.number}",
            author_association=self._association(issue.repo, comment.user),
        )
        return body

    def reaction(self, reaction: Reaction) -> dict[str, Any]:
        body = self._example("reaction")
        body.update(
            id=reaction.id,
            node_id=node_id("Reaction", reaction.id),
            user=self.user(reaction.user),
            content=reaction.content,
            created_at=iso(reaction.created_at),
        )
        return body

    def permission(self, repo: Repo, user: User, role: str) -> dict[str, Any]:
        body = self._example("repository-collaborator-permission-response-if-user-has-admin-permissions")
        collaborator = self.user(user)
        collaborator["permissions"] = {grant: grant in ROLE_GRANTS[role] for grant in ROLE_GRANTS["admin"]}
        collaborator["role_name"] = role
        body.update(permission=LEGACY_PERMISSION[role], role_name=role, user=collaborator)
        return body

    # -- checks --------------------------------------------------------------------------------

    def app(self, app: App) -> dict[str, Any]:
        body: dict[str, Any] = self._example("check-run")["app"]
        body.update(
            id=app.id,
            slug=app.slug,
            node_id=node_id("Integration", app.id),
            client_id=f"Iv1.{_blob_sha('app', str(app.id))[:16]}",
            owner=self.user(app.owner),
            name=app.slug,
            description="",
            external_url=f"{WEB}/apps/{app.slug}",
            html_url=f"{WEB}/apps/{app.slug}",
            permissions=dict(INSTALLATION_PERMISSIONS),
            events=["check_run", "issue_comment", "pull_request"],
        )
        return body

    def _check_pull_requests(self, run: CheckRun) -> list[dict[str, Any]]:
        # GitHub lists only pull requests whose head branch lives in the same repository: a run on a
        # fork's commit has `pull_requests: []`, which trips clients that look the PR up this way.
        pulls = [
            issue
            for issue in self.state.issues.values()
            if isinstance(issue, Pull)
            and issue.repo is run.repo
            and issue.head_repo is None
            and issue.head_sha == run.head_sha
            and issue.state == "open"
        ]
        repo_ref = {"id": run.repo.id, "url": f"{self.api}/repos/{run.repo.full_name}", "name": run.repo.name}
        return [
            {
                "url": f"{self.api}/repos/{run.repo.full_name}/pulls/{pull.number}",
                "id": pull.pull_id,
                "number": pull.number,
                "head": {"ref": pull.head_ref, "sha": pull.head_sha, "repo": repo_ref},
                "base": {"ref": run.repo.default_branch, "sha": pull.base_sha, "repo": repo_ref},
            }
            for pull in pulls
        ]

    def check_run(self, run: CheckRun) -> dict[str, Any]:
        full = run.repo.full_name
        body = self._example("check-run", full)
        url = f"{self.api}/repos/{full}/check-runs/{run.id}"
        output = {"title": None, "summary": None, "text": None, **run.output}
        output.update(annotations_count=len(run.annotations), annotations_url=f"{url}/annotations")
        body.update(
            id=run.id,
            head_sha=run.head_sha,
            node_id=node_id("CheckRun", run.id),
            external_id=run.external_id,
            url=url,
            html_url=f"{WEB}/{full}/runs/{run.id}",
            details_url=run.details_url or f"{WEB}/apps/{run.app.slug}",
            status=run.status,
            conclusion=run.conclusion,
            started_at=iso(run.started_at),
            completed_at=iso(run.completed_at) if run.completed_at else None,
            output=output,
            name=run.name,
            check_suite={"id": run.suite_id},
            app=self.app(run.app),
            pull_requests=self._check_pull_requests(run),
        )
        body.pop("deployment", None)
        return body

    def annotation(self, run: CheckRun, annotation: dict[str, Any]) -> dict[str, Any]:
        body = self._example("check-annotation-items")
        body.update({key: None for key in ("start_column", "end_column", "title", "raw_details")})
        body.update({key: value for key, value in annotation.items() if key in body})
        quoted = urllib.parse.quote(annotation["path"])
        body["blob_href"] = f"{WEB}/{run.repo.full_name}/blob/{run.head_sha}/{quoted}"
        return body

    # -- actions -------------------------------------------------------------------------------

    def workflow(self, workflow: Workflow) -> dict[str, Any]:
        full = workflow.repo.full_name
        body = self._example("workflow")
        path = f".github/workflows/{workflow.file_name}"
        body.update(
            id=workflow.id,
            node_id=node_id("Workflow", workflow.id),
            name=workflow.name,
            path=path,
            state="active",
            created_at=iso(workflow.created_at),
            updated_at=iso(workflow.created_at),
            url=f"{self.api}/repos/{full}/actions/workflows/{workflow.id}",
            html_url=f"{WEB}/{full}/blob/{workflow.repo.default_branch}/{path}",
            badge_url=f"{WEB}/{full}/workflows/{urllib.parse.quote(workflow.name)}/badge.svg",
        )
        return body

    # -- apps ----------------------------------------------------------------------------------

    def installation(self, installation: Installation) -> dict[str, Any]:
        body = self._example("installation")
        app, account = installation.app, installation.account
        body.update(
            id=installation.id,
            account=self.user(account),
            repository_selection="selected" if installation.repos else "all",
            access_tokens_url=f"{self.api}/app/installations/{installation.id}/access_tokens",
            repositories_url=f"{self.api}/installation/repositories",
            html_url=f"{WEB}/settings/installations/{installation.id}",
            app_id=app.id,
            client_id=f"Iv1.{_blob_sha('app', str(app.id))[:16]}",
            target_id=account.id,
            target_type=account.type,
            permissions=dict(INSTALLATION_PERMISSIONS),
            events=["check_run", "issue_comment", "pull_request"],
            single_file_name=None,
            has_multiple_single_files=False,
            single_file_paths=[],
            app_slug=app.slug,
        )
        return body

    def installation_token(self, token: Token, repos: list[Repo]) -> dict[str, Any]:
        body = self._example("installation-token")
        template = body["repositories"][0]
        assert token.expires_at is not None
        body.update(
            token=token.token,
            expires_at=iso(token.expires_at),
            permissions=dict(token.permissions),
            repository_selection="selected" if token.repos is not None else "all",
        )
        if token.repos is None:
            body.pop("repositories", None)
        else:
            body["repositories"] = [self._repository(template, "octocat/Hello-World", repo) for repo in repos]
        return body

    def rate_limit(self, token: Token, reset: int) -> dict[str, Any]:
        body = self._example("rate-limit-overview")
        core = {"limit": 5000, "used": token.used, "remaining": 5000 - token.used, "reset": reset}
        body["resources"]["core"] = core
        body["rate"] = dict(core)
        return body

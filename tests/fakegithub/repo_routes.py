"""Handlers for repositories, pull requests, issues, commits, collaborators, comments and reactions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from .exchange import Call, Problem, Reply, invalid, not_found, paginate
from .state import MAX_LISTED_COMMITS, MAX_LISTED_FILES, Comment, Issue, Pull, Reaction, User, now

# GitHub refuses longer issue comment bodies (counted in characters).
MAX_COMMENT_BODY = 65536


def get_repo(call: Call) -> Reply:
    return Reply(200, call.shapes.full_repository(call.repo()))


def _issue(call: Call) -> Issue:
    number = call.int_param("issue_number" if "issue_number" in call.params else "pull_number")
    issue = call.state.issue(call.repo().full_name, number)
    if issue is None:
        raise not_found()
    return issue


def _pull(call: Call) -> Pull:
    issue = _issue(call)
    if not isinstance(issue, Pull):
        raise not_found()
    return issue


def get_pull(call: Call) -> Reply:
    return Reply(200, call.shapes.pull(_pull(call)))


def list_pull_files(call: Call) -> Reply:
    pull = _pull(call)
    page, headers = paginate(call, pull.files[:MAX_LISTED_FILES])
    return Reply(200, [call.shapes.diff_entry(pull, entry) for entry in page], headers)


def list_pull_commits(call: Call) -> Reply:
    pull = _pull(call)
    page, headers = paginate(call, pull.commits[:MAX_LISTED_COMMITS])
    return Reply(
        200, [call.shapes.commit(pull.repo, c.sha, c.message, c.author, c.parents) for c in page], headers
    )


def get_issue(call: Call) -> Reply:
    return Reply(200, call.shapes.issue(_issue(call)))


def get_commit(call: Call) -> Reply:
    repo, ref = call.repo(), call.params["ref"]
    message = call.state.commits.get((repo.full_name.lower(), ref))
    if message is None:
        raise Problem(422, f"No commit found for SHA: {ref}")
    return Reply(200, call.shapes.commit(repo, ref, message))


def list_commit_pulls(call: Call) -> Reply:
    repo, sha = call.repo(), call.params["commit_sha"]
    pulls = [
        issue
        for issue in call.state.issues.values()
        if isinstance(issue, Pull) and issue.repo is repo and issue.head_sha == sha
    ]
    page, headers = paginate(call, sorted(pulls, key=lambda pull: pull.number))
    return Reply(200, [call.shapes.pull_simple(pull) for pull in page], headers)


def get_permission(call: Call) -> Reply:
    repo = call.repo()
    user = call.state.users.get(call.params["username"].lower())
    if user is None:
        raise not_found()
    role = call.state.permission_of(repo, user)
    if role is None:
        # GitHub answers for anyone, collaborator or not: everyone may read a public repository.
        role = "none" if repo.private else "read"
    return Reply(200, call.shapes.permission(repo, user, role))


# -- comments ------------------------------------------------------------------------------------


def _actor(call: Call) -> User:
    assert call.token is not None
    return call.token.user


def _comment_body(call: Call) -> str:
    body = call.json_body().get("body")
    assert isinstance(body, str)  # the request schema requires a string
    if len(body) > MAX_COMMENT_BODY:
        raise invalid(
            "IssueComment",
            "data",
            f"Body is too long (maximum is {MAX_COMMENT_BODY} characters)",
            "unprocessable",
        )
    if not body.strip():
        raise invalid("IssueComment", "body", "body cannot be blank", "missing_field")
    return body


def _since(call: Call) -> datetime | None:
    raw = call.query.get("since")
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise invalid("IssueComment", "since", f"{raw!r} is not an ISO 8601 timestamp") from None


def list_comments(call: Call) -> Reply:
    issue, since = _issue(call), _since(call)
    comments = [c for c in call.state.comments_on(issue) if since is None or c.updated_at >= since]
    page, headers = paginate(call, sorted(comments, key=lambda comment: comment.id))
    return Reply(200, [call.shapes.comment(comment) for comment in page], headers)


def create_comment(call: Call) -> Reply:
    issue = _issue(call)
    comment = call.state.add_comment(issue, _comment_body(call), _actor(call))
    body = call.shapes.comment(comment)
    return Reply(201, body, {"Location": body["url"]})


def _existing_comment(call: Call) -> Comment:
    comment = call.state.comments.get(call.int_param("comment_id"))
    if comment is None or comment.issue.repo is not call.repo():
        raise not_found()
    return comment


def get_comment(call: Call) -> Reply:
    return Reply(200, call.shapes.comment(_existing_comment(call)))


def update_comment(call: Call) -> Reply:
    comment = _existing_comment(call)
    comment.body = _comment_body(call)
    comment.updated_at = now()
    return Reply(200, call.shapes.comment(comment))


def delete_comment(call: Call) -> Reply:
    comment = _existing_comment(call)
    del call.state.comments[comment.id]
    call.state.reactions = [r for r in call.state.reactions if r.comment_id != comment.id]
    return Reply(204)


# -- reactions -----------------------------------------------------------------------------------


def create_reaction(call: Call) -> Reply:
    comment, user = _existing_comment(call), _actor(call)
    content = call.json_body()["content"]
    for reaction in call.state.reactions:
        # The same person reacting the same way again gets the existing reaction back, with 200.
        if reaction.comment_id == comment.id and reaction.user is user and reaction.content == content:
            return Reply(200, call.shapes.reaction(reaction))
    reaction = Reaction(call.state.next_id(), comment.id, user, content)
    call.state.reactions.append(reaction)
    return Reply(201, call.shapes.reaction(reaction))


def list_reactions(call: Call) -> Reply:
    comment, content = _existing_comment(call), call.query.get("content")
    reactions = [
        r for r in call.state.reactions if r.comment_id == comment.id and content in (None, r.content)
    ]
    page, headers = paginate(call, reactions)
    return Reply(200, [call.shapes.reaction(reaction) for reaction in page], headers)


ROUTES: dict[str, Callable[[Call], Reply]] = {
    "repos/get": get_repo,
    "pulls/get": get_pull,
    "pulls/list-files": list_pull_files,
    "pulls/list-commits": list_pull_commits,
    "issues/get": get_issue,
    "repos/get-commit": get_commit,
    "repos/list-pull-requests-associated-with-commit": list_commit_pulls,
    "repos/get-collaborator-permission-level": get_permission,
    "issues/list-comments": list_comments,
    "issues/create-comment": create_comment,
    "issues/get-comment": get_comment,
    "issues/update-comment": update_comment,
    "issues/delete-comment": delete_comment,
    "reactions/create-for-issue-comment": create_reaction,
    "reactions/list-for-issue-comment": list_reactions,
}

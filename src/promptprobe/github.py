"""The gate on a GitHub runner: the job summary and one pull-request comment per probe set.

A runner sets GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_EVENT_PATH (the event's JSON: the pull
request's number, and whether it comes from a fork), GITHUB_RUN_ID and GITHUB_SERVER_URL (the
link to the run's artifacts) and GITHUB_STEP_SUMMARY; the workflow gives GITHUB_TOKEN. The comment
carries a hidden marker, `<!-- promptprobe:PROBESET -->`, by which the next push finds it and
updates it in place instead of adding another. The REST calls are the documented issue-comment
ones (a pull request is an issue): list, create, update.
"""

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

PER_PAGE = 100
MAX_PAGES = 30  # 3,000 comments: far past any pull request a gate comments on
API_VERSION = "2022-11-28"


@dataclass(frozen=True)
class Runner:
    """What a GitHub runner says about the job, read from its environment."""

    api_url: str
    repository: str
    token: str | None
    run_url: str | None  # the workflow run's page, where its artifacts are listed
    pull_request: int | None
    fork: bool
    summary: Path | None

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> "Runner":
        env = os.environ if env is None else env
        event = _event(env.get("GITHUB_EVENT_PATH"))
        pull = event.get("pull_request") or {}
        number = pull.get("number") or (event.get("issue") or {}).get("number")
        repository = env.get("GITHUB_REPOSITORY", "")
        head = ((pull.get("head") or {}).get("repo") or {}).get("full_name")
        server, run_id = env.get("GITHUB_SERVER_URL"), env.get("GITHUB_RUN_ID")
        run_url = (
            f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}"
            if server and run_id and repository
            else None
        )
        return cls(
            api_url=env.get("GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            repository=repository,
            token=env.get("GITHUB_TOKEN") or None,
            run_url=run_url,
            pull_request=int(number) if number else None,
            fork=bool(head) and head != repository,
            summary=Path(env["GITHUB_STEP_SUMMARY"]) if env.get("GITHUB_STEP_SUMMARY") else None,
        )


def _event(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # no event to read: the gate still writes the summary, and says there is no comment
    return data if isinstance(data, dict) else {}


def marker(probeset: str) -> str:
    """The hidden line by which a push finds the comment of its probe set."""
    name = Path(probeset).stem or "probes"
    return f"<!-- promptprobe:{name} -->"


def artifact_link(runner: Runner, artifact: str) -> str | None:
    if runner.run_url is None:
        return None
    return (
        f"The run directory and its HTML report: artifact `{artifact}` of "
        f"[this workflow run]({runner.run_url}#artifacts)."
    )


def write_summary(runner: Runner, markdown: str) -> None:
    if runner.summary is not None:
        with open(runner.summary, "a", encoding="utf-8") as out:
            out.write(markdown + "\n")


@dataclass(frozen=True)
class Posted:
    """What the comment step did: created, updated, or skipped (and why)."""

    action: str  # "created", "updated", "skipped"
    url: str | None = None
    reason: str | None = None

    def sentence(self) -> str:
        if self.action == "skipped":
            return f"pull-request comment not posted: {self.reason}"
        return f"pull-request comment {self.action}: {self.url}"


def post_comment(runner: Runner, key: str, body: str, client: httpx.Client | None = None) -> Posted:
    """Create the comment holding `key`, or update the one that already does."""
    if runner.pull_request is None:
        return Posted("skipped", reason="this event is not a pull request (the job summary has the table)")
    if not runner.token:
        return Posted("skipped", reason="GITHUB_TOKEN is not set (give it in the step's env)")
    if not runner.repository:
        return Posted("skipped", reason="GITHUB_REPOSITORY is not set")
    text = f"{key}\n{body}"
    own = client is None
    client = client or httpx.Client(timeout=30)
    headers = {
        "Authorization": f"Bearer {runner.token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
    }
    comments = f"{runner.api_url}/repos/{runner.repository}/issues/{runner.pull_request}/comments"
    try:
        found = _find(client, comments, headers, key)
        if found is None:
            reply = client.post(comments, headers=headers, json={"body": text})
            action = "created"
        else:
            url = f"{runner.api_url}/repos/{runner.repository}/issues/comments/{found}"
            reply = client.patch(url, headers=headers, json={"body": text})
            action = "updated"
        if reply.status_code >= 400:
            return Posted("skipped", reason=_refused(reply, runner))
        return Posted(action, url=reply.json().get("html_url"))
    except httpx.HTTPStatusError as exc:
        return Posted("skipped", reason=_refused(exc.response, runner))
    except (httpx.HTTPError, ValueError) as exc:
        return Posted("skipped", reason=f"the GitHub API could not be reached ({type(exc).__name__}: {exc})")
    finally:
        if own:
            client.close()


def _find(client: httpx.Client, url: str, headers: dict[str, str], key: str) -> int | None:
    """The id of the first comment whose body holds `key`, over every page."""
    for page in range(1, MAX_PAGES + 1):
        reply = client.get(url, headers=headers, params={"per_page": PER_PAGE, "page": page})
        reply.raise_for_status()
        comments = reply.json()
        for comment in comments:
            if key in (comment.get("body") or ""):
                return int(comment["id"])
        if len(comments) < PER_PAGE:
            return None
    return None


def _refused(reply: httpx.Response, runner: Runner) -> str:
    status = reply.status_code
    if status in (401, 403, 404) and runner.fork:
        return (
            f"GitHub refused it (HTTP {status}): on a pull request from a fork the token can only "
            "read; the job summary has the table"
        )
    if status in (401, 403, 404):
        return (
            f"GitHub refused it (HTTP {status}): give the job `permissions: pull-requests: write` "
            "and the step GITHUB_TOKEN"
        )
    return f"GitHub answered HTTP {status}"


FORK_NOTE = (
    "This pull request comes from a fork: GitHub gives such a workflow no secrets, so the gate has no "
    "model key and cannot probe. A maintainer can run it on a branch of this repository."
)

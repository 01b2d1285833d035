"""Code that travels with a workload: team-owned bundles, the `code` and `requirements` a submit names, and what
its job's environment gets to fetch them (fabrics.travel runs on the node).

`code` is `{"digest": "<sha256>"}`, a bundle the workload's team uploaded (`PUT /api/v1/code/<sha256>/`), or
`{"git": "<https or ssh URL>", "commit": "<40 hex digits>"}`; `requirements` is a requirements file's text. The
job fetches its bundle from `GET /api/v1/workloads/<id>/code/` with its own secret (the one its GPU sampler and
notebook callback use, portal.workloads.notebook_endpoint): the secret speaks for one run of one workload, and
the workload names one bundle its team owns, so no job reads another team's code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction

from fabrics.travel import node
from portal import access
from portal.accounts.models import ResourceGroup
from portal.code import store
from portal.code.models import Bundle
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.paths import Paths, path_of
from portal.workloads.states import FINISHED

DIGEST = re.compile(r"[0-9a-f]{64}")
COMMIT = re.compile(r"[0-9a-f]{40}")
# https://host/path or ssh://[user@]host[:port]/path, or scp's user@host:path; nothing a shell or git would read
# as an option (git gets it after `--` anyway, and the node allows only https and ssh).
GIT_URL = re.compile(
    r"(?:(?:https|ssh)://(?:[A-Za-z0-9._~%+-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?/[A-Za-z0-9._~%+/@-]*"
    r"|[A-Za-z0-9._-]+@[A-Za-z0-9][A-Za-z0-9.-]*:[A-Za-z0-9._~+/][A-Za-z0-9._~+/-]*)"
)
MAX_GIT_URL = 500
MAX_REQUIREMENTS_BYTES = 64 * 1024
CODE_SHAPES = 'Give {"digest": "<sha256 of an uploaded bundle>"} or {"git": "<https or ssh URL>", "commit": "<sha>"}.'


class Rejected(Exception):
    """The request is not valid; `errors` maps each field to what is wrong."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


# -- bundles ----------------------------------------------------------------------------------------


def check_digest(digest: str) -> None:
    if not DIGEST.fullmatch(digest):
        raise Rejected({"digest": ["A bundle is named by its sha256: 64 lowercase hex digits."]})


def team_for(user: Any, slug: str | None) -> ResourceGroup:
    """The team a bundle request is for: the one named, else the user's only team; Rejected otherwise."""
    teams = access.code_groups(user)
    if slug and "\x00" in slug:  # no slug holds one, and PostgreSQL refuses one in a query
        raise Rejected({"group": ["That is not a team's name."]})
    if slug:
        team = teams.filter(slug=slug).first()
        if team is None:
            raise Rejected({"group": [f"You have no team {slug!r}."]})
        return team
    mine = list(teams[:2])
    if len(mine) != 1:
        raise Rejected({"group": ["Say which team the code is for (?group=<team>)."]})
    return mine[0]


def owned(group: ResourceGroup, digest: str) -> bool:
    return Bundle.objects.filter(group=group, digest=digest).exists()


def do_upload(user: Any, group: ResourceGroup, digest: str, stream: IO[bytes], declared: int | None) -> bool:
    """Keep the bundle for the team; True when the team did not have it. store.TooLarge or store.Unfit when it
    may not be kept. The team proves it has the bytes by sending them, even where another team's are on disk."""
    with store.received(stream, digest, declared) as (tmp, size, unpacked):
        if owned(group, digest):
            return False
        store.keep(tmp, digest)
    try:
        with transaction.atomic():
            Bundle.objects.create(digest=digest, group=group, size=size, unpacked=unpacked, uploaded_by=user)
    except IntegrityError:  # the same upload, racing: the team has it either way
        return False
    return True


def fetchable(group: ResourceGroup, digest: str) -> Path | None:
    """The team's bundle file (the caller made sure the team is the user's: team_for); None when the team has
    no such bundle."""
    path = store.path_of(digest)
    return path if owned(group, digest) and path.is_file() else None


def job_bundle(pk: UUID, authorization: str) -> Path | None:
    """The bundle of the workload whose job sent `Authorization: Bearer <its secret>`, while it is not finished;
    None for a wrong secret, no such workload, one without a bundle, or a bundle its team no longer has."""
    w = Workload.objects.filter(pk=pk).only("id", "attempt", "state", "group", "code").first()
    if w is None or not notebook_endpoint.speaks_for(w.run_id, authorization) or w.state in FINISHED:
        return None
    digest = w.code.get("digest") if isinstance(w.code, dict) else None
    if not isinstance(digest, str) or not Bundle.objects.filter(group_id=w.group_id, digest=digest).exists():
        return None
    path = store.path_of(digest)
    return path if path.is_file() else None


# -- submit -------------------------------------------------------------------------------------------


def check(code: Any, requirements: str, errors: dict[str, list[str]]) -> dict[str, str]:
    """The code reference as kept on the workload ({} for none), adding what is wrong to errors."""
    if requirements:
        problem = _text_problem(requirements)
        if problem:
            errors.setdefault("requirements", []).append(problem)
    if code is None or code == {}:
        return {}
    if not isinstance(code, Mapping) or not all(isinstance(v, str) for v in code.values()):
        errors.setdefault("code", []).append(CODE_SHAPES)
        return {}
    keys = set(code)
    if keys == {"digest"}:
        if not DIGEST.fullmatch(code["digest"]):
            errors.setdefault("code.digest", []).append("A bundle's sha256: 64 lowercase hex digits.")
        return {"digest": code["digest"]}
    if keys == {"git", "commit"}:
        url, commit = code["git"], code["commit"]
        if len(url) > MAX_GIT_URL or not GIT_URL.fullmatch(url):
            errors.setdefault("code.git", []).append(
                "An https:// or ssh:// URL, or user@host:path, of a git repository (no spaces or quotes)."
            )
        if not COMMIT.fullmatch(commit):
            errors.setdefault("code.commit", []).append("A commit's full sha: 40 lowercase hex digits.")
        return {"git": url, "commit": commit}
    errors.setdefault("code", []).append(CODE_SHAPES)
    return {}


def check_owned(code: Mapping[str, str], group: ResourceGroup, errors: dict[str, list[str]]) -> None:
    """A bundle the workload's team has uploaded; one it has not is refused as if no one had."""
    digest = code.get("digest")
    if digest and DIGEST.fullmatch(digest) and not owned(group, digest):
        errors.setdefault("code.digest", []).append(
            f"Team {group.slug} has no bundle {digest[:12]}…: upload it first (gridlane submit --code does)."
        )


def _text_problem(text: str) -> str:
    if "\x00" in text:
        return "The requirements contain a NUL character."
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_REQUIREMENTS_BYTES:
        return f"The requirements are longer than {MAX_REQUIREMENTS_BYTES // 1024} KiB."
    return ""


def job_env(w: Workload, paths: Paths | None = None) -> dict[str, str]:
    """What the job's environment gets to make its code and packages ready (nothing when it brings neither)."""
    env: dict[str, str] = {}
    code = w.code if isinstance(w.code, dict) else {}
    if code.get("digest"):
        url = settings.GRIDLANE_PUBLIC_URL + path_of("api:workload-code", w.pk, paths)
        env |= {node.CODE_DIGEST_ENV: code["digest"], node.CODE_URL_ENV: url}
    elif code.get("git"):
        env |= {node.GIT_URL_ENV: code["git"], node.GIT_COMMIT_ENV: code.get("commit", "")}
    if w.requirements:
        env[node.REQUIREMENTS_ENV] = w.requirements
    return env

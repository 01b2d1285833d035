"""Every page and form on the embedded SQLite database, as a newcomer meets them (run by
tests/test_embedded_pages.py in a process of its own, with no DATABASE_URL).

Migrates and seeds the demo into a fresh SQLite file, then, for each of the cast, asks for every page that takes
no argument (and those of a workload, a team, an agent), and posts every form those pages carry with the values
they show, plus the main submit forms filled in as a person would. Prints one JSON object: the pages and forms
visited, and every one that answered 500 (with its exception).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from html.parser import HTMLParser
from typing import Any

SKIP_POSTS = ("/accounts/logout/", "/admin/logout/", "/revoke/", "/disable/", "/oidc/")
PAGES = [
    "/",
    "/?scope=team",
    "/workloads/new/",
    "/workloads/new/script/",
    "/notebooks/new/",
    "/leases/new/",
    "/accounts/",
    "/accounts/notifications/",
    "/accounts/agents/",
    "/accounts/agents/new/",
    "/teams/",
    "/teams/vision/",
    "/teams/vision/usage.csv",
    "/teams/vision/chargeback/",
    "/teams/vision/grants/new/",
    "/it/queues/",
    "/it/fabrics/",
    "/it/capacity/",
    "/it/burst/",
    "/it/grants/",
    "/it/what-if/",
    "/it/objectives/",
    "/admin/",
    "/healthz",
    "/connect/00000000-0000-0000-0000-000000000000/",
]
SCRIPT = "#!/bin/bash\n#SBATCH --job-name=pasted\n#SBATCH --gpus-per-node=1 -t 5\nhostname\n"


class Forms(HTMLParser):
    """The POST forms of a page: their action and the values their fields show (the first option of a select,
    checked boxes and radios, textareas' text)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []
        self._select = ""
        self._textarea = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            if (a.get("method") or "").lower() == "post" or a.get("hx-post"):
                self.forms.append((a.get("hx-post") or a.get("action") or "", {}))
            return
        if not self.forms or not a.get("name"):
            return
        fields = self.forms[-1][1]
        if tag == "input" and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            fields.setdefault(a["name"], a.get("value", ""))
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select:
            if self._select not in fields or "selected" in a:
                fields[self._select] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = a["name"]
            fields.setdefault(a["name"], "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = ""
        elif tag == "textarea":
            self._textarea = ""

    def handle_data(self, data: str) -> None:
        if self._textarea and self.forms:
            self.forms[-1][1][self._textarea] += data


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    with open(os.devnull, "w") as quiet:
        call_command("migrate", "--no-input", verbosity=0, stdout=quiet)
        call_command("seed_demo", stdout=quiet)
    from django.contrib.auth import get_user_model

    from portal.workloads.models import Workload

    seen: list[str] = []
    failed: list[dict[str, Any]] = []

    def visit(client: Client, who: str, method: str, url: str, data: dict[str, Any] | None = None) -> Any:
        seen.append(f"{who} {method} {url}")
        try:
            get = method == "GET"
            response = client.get(url) if get else client.post(url, data or {}, HTTP_HX_REQUEST="true")
        except Exception:  # each failure is reported, and the walk goes on
            failed.append({"who": who, "request": f"{method} {url}", "error": traceback.format_exc()[-2000:]})
            return None
        if response.status_code >= 500:
            failed.append({"who": who, "request": f"{method} {url}", "error": f"status {response.status_code}"})
        return response

    users = get_user_model().objects
    for who in ("alice", "bob", "charlie", "it"):
        client = Client()
        client.force_login(users.get(username=who))
        # The main forms, filled in as a person would: the script page reaches the queues that take scripts.
        for url, data in (
            ("/workloads/new/script/", {"queue": "scripts", "kind": "batch", "script": SCRIPT, "priority": "normal"}),
            ("/workloads/new/", {"queue": "train", "kind": "training", "name": f"walk-{who}",
                                 "command": "echo hi", "gpus": "1", "cpus": "1", "memory_gb": "1", "nodes": "1",
                                 "runtime_limit_minutes": "5", "priority": "normal", "group": "",
                                 "profile": "custom"}),
        ):  # fmt: skip
            visit(client, who, "POST", url, data)
        pages = list(PAGES)
        for w in Workload.objects.filter(owner__username=who)[:2]:
            pages += [f"/workloads/{w.pk}/", f"/workloads/{w.pk}/log/", f"/workloads/{w.pk}/log.txt"]
        for url in pages:
            response = visit(client, who, "GET", url)
            if response is None or response.status_code != 200 or "html" not in response.get("Content-Type", ""):
                continue
            parser = Forms()
            parser.feed(response.content.decode())
            for action, fields in parser.forms:
                target = action or url
                if target.startswith("/") and not any(s in target for s in SKIP_POSTS):
                    visit(client, who, "POST", target, fields)
    json.dump({"seen": seen, "failed": failed}, sys.stdout)


if __name__ == "__main__":
    main()

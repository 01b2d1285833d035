"""Which part of the guides explains each page: the header's Help link leads there (the guides' index elsewhere).

`HELP` maps a view's name to a document and a heading's anchor; tests/docs/test_help.py holds every entry to a
view that exists and an anchor its document has."""

from __future__ import annotations

from functools import cache

from django.http import HttpRequest
from django.urls import reverse

HELP: dict[str, tuple[str, str]] = {
    "workloads:list": ("user-guide", "training-runs-and-batch-jobs"),
    "workloads:new": ("user-guide", "training-runs-and-batch-jobs"),
    "workloads:new_script": ("user-guide", "scripts-as-written"),
    "workloads:new_notebook": ("user-guide", "notebooks"),
    "workloads:new_vm": ("user-guide", "vm-leases"),
    "workloads:detail": ("user-guide", "training-runs-and-batch-jobs"),
    "workloads:relaunch": ("user-guide", "training-runs-and-batch-jobs"),
    "workloads:log": ("user-guide", "training-runs-and-batch-jobs"),
    "accounts:home": ("user-guide", "the-command-line"),
    "accounts:notifications": ("lead-guide", "notifications"),
    "accounts:agents": ("user-guide", "the-api"),
    "dashboards:index": ("lead-guide", "the-team-dashboard"),
    "dashboards:team": ("lead-guide", "the-team-dashboard"),
    "dashboards:team-chargeback": ("lead-guide", "chargeback"),
    "dashboards:grant-new": ("lead-guide", "temporary-grants"),
    "it:queues": ("it-guide", "queues"),
    "it:fabrics": ("it-guide", "fabrics"),
    "it:capacity": ("it-guide", "capacity-planning"),
    "it:burst": ("it-guide", "cloud-burst"),
    "it:grants": ("it-guide", "temporary-grants"),
    "it:whatif": ("it-guide", "what-if"),
    "it:whatif-run": ("it-guide", "what-if"),
}


@cache
def url_for(view_name: str | None) -> str:
    """The Help link's target for a view (the guides' index for a view with no entry)."""
    if view_name in HELP:
        doc, section = HELP[view_name]
        return f"{reverse('docs:page', args=[doc])}#{section}"
    return reverse("docs:index")


def help_link(request: HttpRequest) -> dict[str, object]:
    """Context processor: `help_url` for the header."""
    match = getattr(request, "resolver_match", None)
    return {"help_url": url_for(match.view_name if match else None)}

"""Team dashboards. One view serves the full page or, when htmx asks, its partial."""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import F, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from portal import access
from portal.accounts.models import Membership
from portal.budgets import services as budget_services
from portal.budgets import shown
from portal.budgets.forms import BudgetForm
from portal.dashboards import data, it
from portal.dashboards.forms import DecisionForm, GrantForm
from portal.notify import outbox
from portal.notify.models import Event
from portal.queues import grants
from portal.queues.models import Fabric, Queue, QuotaGrant
from portal.usage import idle_now, report
from portal.usage.rollup import IDLE_BELOW


def _partial(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False)) and not request.htmx.boosted  # type: ignore[attr-defined]


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The teams whose dashboard the user may see; straight to it when there is only one."""
    groups = list(access.visible_groups(request.user))
    if len(groups) == 1:
        return redirect("dashboards:team", slug=groups[0].slug)
    return render(request, "dashboards/index.html", {"groups": groups})


@login_required
def team(request: HttpRequest, slug: str) -> HttpResponse:
    group, lead = access.access_group_led(request.user, slug)  # lead: the export link, the grants' form and list
    window = data.window_of(request.GET.get("window"))
    now = timezone.now()
    dashboard = data.team_dashboard(group, window, now)
    leads = access.may_export_usage(request.user, group, lead=lead)
    every_grant = access.may_see_every_grant(request.user, group, lead=lead)
    context = {
        "d": dashboard,
        "windows": list(data.WINDOWS),
        "may_export": leads,
        # The CSV of the window shown: from its first hour to the end of the current one (report.check_period).
        "csv_query": urlencode({"from": dashboard.hours[0].isoformat()}) if dashboard.hours else "days=7",
        "may_ask": access.may_ask_for_grant(request.user, group, lead=lead),
        # Leads and IT: every grant of the window and to come; members: those approved and not over.
        "grants": [(g, g.shown_state(now)) for g in dashboard.grants if every_grant or g.shown_state(now) in LIVE],
        # The team's idle allocations now, for its leads and IT (portal.usage.idle_now): two queries, theirs only.
        "idle_now": idle_now.team_idle_now(group, now) if leads else None,
        "idle_window_minutes": settings.GRIDLANE_IDLE_WINDOW_MINUTES,
        "may_budget": leads,  # its leads and IT, as for the export
        "budgets": shown.team_budgets(group, now),  # one query: the spend the worker's budget step counted
        "currency": settings.GRIDLANE_CURRENCY,
    }
    template = "dashboards/_team.html" if _partial(request) else "dashboards/team.html"
    return render(request, template, context)


LIVE = ("scheduled", "active")  # an approved grant's states, by the clock, that members see


@login_required
def grant_new(request: HttpRequest, slug: str) -> HttpResponse:
    """A lead asks for more GPUs for a while: approved at once within the department's unused reservation,
    else waiting for IT. Another team's answers 404; a member's 403."""
    group = access.access_group(request.user, slug)
    if not access.may_ask_for_grant(request.user, group):
        raise PermissionDenied("The team's leads ask for temporary grants.")
    form = GrantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        now = timezone.now()
        try:
            grant = grants.check_ask(request.user, group, form.ask(), now)
        except ValidationError as error:
            form.put(error)
        else:
            grants.do_ask(request.user, grant, now)
            return redirect(f"{reverse('dashboards:team', args=[group.slug])}#grants")
    status = 400 if form.errors else 200
    return render(request, "dashboards/grant_new.html", {"group": group, "form": form}, status=status)


@login_required
def budget_set(request: HttpRequest, slug: str) -> HttpResponse:
    """IT sets any budget of the team, a lead its members' and agents' (portal.budgets.services). Another team's
    answers 404; a member's 403."""
    group, lead = access.access_group_led(request.user, slug)
    if not (lead or access.is_it(request.user)):
        raise PermissionDenied("The team's leads and IT set its budgets.")
    form = BudgetForm(group, request.POST or None)
    if request.method == "POST" and form.is_valid():
        budget = form.budget(group)
        try:
            budget_services.check_set(request.user, budget)
        except ValidationError as error:
            form.put(error)
        else:
            budget_services.do_set(request.user, budget, timezone.now())
            return redirect(f"{reverse('dashboards:team', args=[group.slug])}#budgets")
    status = 400 if form.errors else 200
    return render(request, "dashboards/budget_set.html", {"group": group, "form": form}, status=status)


@login_required
@require_POST
def grant_withdraw(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """A lead takes an ask back, or gives an approved grant up early."""
    group = access.access_group(request.user, slug)
    grant = access.access_grant(request.user, group, pk)
    if not access.may_ask_for_grant(request.user, group):
        raise PermissionDenied("The team's leads withdraw its grants.")
    grants.do_withdraw(request.user, grant, timezone.now())
    return redirect(f"{reverse('dashboards:team', args=[group.slug])}#grants")


def _it_only(request: HttpRequest) -> None:
    """IT's pages are absent for everyone else."""
    if not access.is_it(request.user):
        raise Http404("No such page.")


@login_required
def it_queues(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    context = {"rows": it.queue_rows()}
    template = "dashboards/_it_queues.html" if _partial(request) else "dashboards/it_queues.html"
    return render(request, template, context)


@login_required
def it_fabrics(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    context = {"rows": it.fabric_rows()}
    template = "dashboards/_it_fabrics.html" if _partial(request) else "dashboards/it_fabrics.html"
    return render(request, template, context)


@login_required
def it_capacity(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    window = data.window_of(request.GET.get("window"))
    context = {"plans": it.capacity_plan(window, timezone.now()), "window": window, "windows": list(data.WINDOWS)}
    template = "dashboards/_it_capacity.html" if _partial(request) else "dashboards/it_capacity.html"
    return render(request, template, context)


@login_required
def it_grants(request: HttpRequest) -> HttpResponse:
    """Asks waiting for IT, oldest first, with Approve and Decline; then the last decisions."""
    _it_only(request)
    rows = QuotaGrant.objects.select_related("team", "fabric", "requested_by", "decided_by")
    context = {
        "waiting": list(rows.filter(state=QuotaGrant.State.REQUESTED).order_by("requested_at")),
        "decided": list(
            rows.exclude(state=QuotaGrant.State.REQUESTED).order_by(F("decided_at").desc(nulls_last=True), "-pk")[:30]
        ),
        "now": timezone.now(),
    }
    return render(request, "dashboards/it_grants.html", context)


@login_required
@require_POST
def it_grant_decide(request: HttpRequest, pk: int) -> HttpResponse:
    _it_only(request)
    grant = access.access_grant_for_it(request.user, pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse("Approve or decline.", status=400, content_type="text/plain; charset=utf-8")
    approve = form.cleaned_data["decision"] == "approve"
    try:
        grants.check_decide(grant, approve)
    except ValidationError as error:
        messages.error(request, f"{grant}: {' '.join(error.messages)}")
    else:
        if grants.do_decide(request.user, grant, approve, form.cleaned_data["note"], timezone.now()):
            messages.success(request, f"{grant}: {'approved' if approve else 'declined'}.")
            _tell_leads(grant, approve)
    return redirect("it:grants")


def _named(by: str, key: object, queue_names: dict[str, str]) -> object:
    """What a person reads for a row's key: a queue's name, not its slug; members and fabrics as they are."""
    return queue_names.get(str(key), key) if by == "queue" else key


def _tell_leads(grant: QuotaGrant, approve: bool) -> None:
    """The team's leads (and whoever asked) hear of IT's decision, where they asked to (portal.notify)."""
    said = "approved" if approve else "declined"
    note = f" IT's note: {grant.decision_note}" if grant.decision_note else ""
    text = f"IT {said} the grant for {grant.team.name}: {grant}.{note}"
    leads = Membership.objects.filter(group=grant.team, role=Membership.Role.LEAD).values_list("user_id", flat=True)
    people = [*leads, *([grant.requested_by_id] if grant.requested_by_id else [])]
    url = f"{settings.GRIDLANE_PUBLIC_URL}{reverse('dashboards:team', args=[grant.team.slug])}"
    outbox.tell_people(people, Event.GRANT, f"grant:{grant.pk}:{grant.state}", f"Grant {said}: {grant.team.name}",
                       text, url)  # fmt: skip


@login_required
def team_usage_csv(request: HttpRequest, slug: str) -> HttpResponse:
    """The team's usage and cost as CSV (the API's figures, `?from=&to=&by=`), for its leads and IT."""
    group = access.access_group(request.user, slug)
    if not access.may_export_usage(request.user, group):
        raise PermissionDenied("The team's leads and IT export its usage.")
    period, errors = report.check_period(request.GET, timezone.now())
    if period is None:
        lines = [f"{name}: {' '.join(messages)}" for name, messages in errors.items()]
        return HttpResponse("\n".join(lines) + "\n", status=400, content_type="text/plain; charset=utf-8")
    if period.by is None:
        period = replace(period, by="member")
    answer = report.team_usage(group, period)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    name = f"{group.slug}-usage-{period.start:%Y%m%d%H}-{period.end:%Y%m%d%H}-by-{period.by}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    columns = list(report.CSV_COLUMNS)
    writer = csv.writer(response)
    writer.writerow([period.by, *columns])
    # A person reads the file: queues by their names (the API's rows keep the slugs it is queried by).
    names = dict(Queue.objects.values_list("slug", "name")) if period.by == "queue" else {}
    for row in answer["rows"]:
        key = str(row[period.by])
        writer.writerow([csv_safe(names.get(key, key)), *(_cell(row.get(c)) for c in columns)])
    writer.writerow(["total", *(_cell(answer["totals"][c]) for c in columns)])
    return response


@login_required
def team_chargeback(request: HttpRequest, slug: str) -> HttpResponse:
    """What the team's compute cost in a month (`?month=YYYY-MM`, default this one) and how much sat idle, in
    totals and per member, queue and fabric: for whoever may export its usage (its leads and IT), read from the
    rollups in a fixed number of queries. A month that is not one is said on the page, with a 400."""
    group = access.access_group(request.user, slug)
    if not access.may_export_usage(request.user, group):
        raise PermissionDenied("The team's leads and IT see its chargeback.")
    now = timezone.now()
    period, error = report.check_month(request.GET.get("month"), now)
    context: dict[str, object] = {"group": group, "error": error, "asked": request.GET.get("month", "")[:20]}
    if period is not None:
        before = report.month_period(*_month_before(period.start))
        c = report.team_chargeback(group, period)
        queue_names = dict(Queue.objects.values_list("slug", "name"))  # queues as people read them
        context |= {
            "period": period,
            "c": c,
            # (by, [(name, figures)]): the template cannot index a row by a name it holds in a variable.
            "tables": [
                (by, [(_named(by, row[by], queue_names), row) for row in rows]) for by, rows in c["tables"].items()
            ],
            "month": f"{period.start:%Y-%m}",
            "before": f"{before.start:%Y-%m}",
            "after": f"{period.end:%Y-%m}" if period.end <= now else None,
            "csv_query": f"from={period.start:%Y-%m-%d}&to={period.end:%Y-%m-%d}",
            "idle_rule_percent": IDLE_BELOW,
            "idle_window_minutes": settings.GRIDLANE_IDLE_WINDOW_MINUTES,
            "currency": settings.GRIDLANE_CURRENCY,
            # Without any price, every cost is 0: the page says "no price set" rather than a cost of 0.00.
            "priced": Fabric.objects.filter(
                Q(gpu_hour_price__gt=0) | Q(cpu_hour_price__gt=0) | Q(memory_gb_hour_price__gt=0)
            ).exists(),
        }
    return render(request, "dashboards/chargeback.html", context, status=400 if error else 200)


def _month_before(start: datetime) -> tuple[int, int]:
    return (start.year, start.month - 1) if start.month > 1 else (start.year - 1, 12)


def _cell(value: object) -> str:
    return "" if value is None else str(value)


def csv_safe(text: str) -> str:
    """A name as a spreadsheet shows it, never as a formula it runs (=, +, -, @ first)."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text

"""Pages for people. Each view serves its full page, or just its partial when htmx asks for a refresh."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from portal import access
from portal.accounts import ratelimit
from portal.agents.models import LeaseKey
from portal.connect import sharing
from portal.workloads import listing, logs, notebook_endpoint, preview, services
from portal.workloads.forms import (
    FORM_OF_KIND,
    BatchScriptForm,
    ExtendForm,
    NotebookForm,
    SubmitForm,
    TrainingForm,
    VMForm,
)
from portal.workloads.models import Workload
from portal.workloads.states import FINISHED

LIST_LIMIT = 100


def _partial(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False)) and not request.htmx.boosted  # type: ignore[attr-defined]


@login_required
def workload_list(request: HttpRequest) -> HttpResponse:
    """My workloads: running notebooks and leases as session cards, then every workload as a row.

    The page stays live whatever the rows' states (work submitted from the API or the CLI appears by itself):
    htmx asks again every few seconds with the version it shows, and while nothing changed the answer is an
    empty 204 after one aggregate query."""
    scope = "team" if request.GET.get("scope") == "team" else "mine"
    # An array is listed as its parent; its page counts the elements.
    workloads = access.visible_workloads(request.user).filter(array_parent__isnull=True)
    if scope != "team":
        workloads = workloads.filter(owner_id=request.user.pk)
    chosen = listing.filters_of(request)
    workloads = listing.apply(workloads, chosen)
    version = _version(workloads)
    if _partial(request) and request.GET.get("v") == version:
        return HttpResponse(status=204)  # nothing changed: htmx keeps what it shows (see base.html)
    rows = list(
        workloads.select_related("queue", "group", "owner").defer("log_tail", "rendered", "command", "script")[
            :LIST_LIMIT
        ]
    )
    sessions = [w for w in rows if w.interactive and w.state not in FINISHED]
    context = {"workloads": rows, "sessions": sessions, "scope": scope, "version": version}
    context |= listing.context(request, scope, chosen)
    template = "workloads/_live.html" if _partial(request) else "workloads/list.html"
    return render(request, template, context)


def _version(workloads: Any) -> str:
    """What the list shows, in one query: how many rows and when the latest changed, and the minute (so that
    "2 minutes ago" and "1 h left" move on even while nothing changes)."""
    seen = workloads.aggregate(n=Count("pk"), latest=Max("updated_at"))
    latest = seen["latest"].timestamp() if seen["latest"] else 0
    return f"{seen['n']}-{latest:.6f}-{int(timezone.now().timestamp() // 60)}"


@login_required
@require_http_methods(["GET", "POST"])
def workload_new(request: HttpRequest) -> HttpResponse:
    initial = _cloned(request, TrainingForm)
    return _new(request, TrainingForm(request.POST or None, user=request.user, initial=initial), "New training run")


@login_required
@require_http_methods(["GET", "POST"])
def script_new(request: HttpRequest) -> HttpResponse:
    form = BatchScriptForm(request.POST or None, request.FILES or None, user=request.user)
    return _new(request, form, "Paste or upload a batch script")


@login_required
@require_http_methods(["GET", "POST"])
def notebook_new(request: HttpRequest) -> HttpResponse:
    initial = _cloned(request, NotebookForm)
    return _new(request, NotebookForm(request.POST or None, user=request.user, initial=initial), "New notebook")


@login_required
@require_http_methods(["GET", "POST"])
def vm_new(request: HttpRequest) -> HttpResponse:
    initial = _last_key(request.user) | _cloned(request, VMForm)
    return _new(request, VMForm(request.POST or None, user=request.user, initial=initial), "New VM lease")


def _last_key(user: Any) -> dict[str, str]:
    """The SSH key and allowed addresses of the person's latest lease, for the next one."""
    last = LeaseKey.objects.filter(workload__owner_id=user.pk).order_by("-workload__submitted_at").first()
    return {"public_key": last.public_key, "from_addresses": last.from_addresses} if last else {}


def _cloned(request: HttpRequest, form_class: type[SubmitForm]) -> dict[str, Any]:
    """The form's initial values from the workload in `?from=` (Clone): one the user may see, else a 404."""
    source = request.GET.get("from")
    if request.method != "GET" or not source:
        return {}
    return form_class.initial_from(access.access_workload(request.user, source))


@login_required
@require_POST
def workload_relaunch(request: HttpRequest, pk: UUID) -> HttpResponse:
    """Submit a finished workload again as it was, as the person asking; when that is refused now (a queue
    changed, say), the form of its kind comes back filled in, with the reasons on its fields."""
    source = access.access_workload(request.user, pk)
    if not source.finished:
        return HttpResponse("Only finished work is relaunched; clone it instead.", status=409)
    form_class = FORM_OF_KIND[source.kind]
    data = form_class.initial_from(source)
    if source.kind == "vm":
        data |= _last_key(request.user)
    data = {k: str(v) if isinstance(v, Decimal) else v for k, v in data.items()}
    form = form_class(data, user=request.user)
    title = f"Relaunch {source.name}"
    # Refused: the form comes back, and the address bar shows the clone form's address (what a reload or a
    # bookmark can open), never the relaunch URL that only takes a POST.
    return _new(request, form, title, action=f"{source.clone_url()}", url=source.clone_url())


def _submit(user: Any, form: TrainingForm | BatchScriptForm | NotebookForm | VMForm) -> Any:
    """Submit the form's request; a VM lease's key is recorded in the same transaction, before any agent
    can claim the lease."""
    with transaction.atomic():
        workload, _ = services.submit(user, form.to_request())
        if isinstance(form, VMForm):
            LeaseKey.objects.update_or_create(
                workload=workload,
                defaults={
                    "public_key": form.cleaned_data["public_key"],
                    "from_addresses": form.cleaned_data["from_addresses"],
                },
            )
    return workload


def _new(
    request: HttpRequest,
    form: TrainingForm | BatchScriptForm | NotebookForm | VMForm,
    title: str,
    action: str = "",
    url: str = "",
) -> HttpResponse:
    """A submit page: the full page, or the form alone (with its errors) when htmx posts. `url`: the address the
    browser shows for the page (when the request's own is one a browser cannot open again). A submit that
    went through leads to the new workload's page, by a redirect (htmx: HX-Redirect, its address pushed)."""
    page = {"form": form, "title": title, "action": action or request.path, "guide": form.guide(), "url": url}
    if request.method == "POST" and "check" in request.POST:
        return _check(request, form, page)
    if request.method == "POST":
        try:
            ratelimit.check_submit(request.user)
        except ratelimit.RateLimited as limited:
            form.is_valid()
            form.add_error(None, str(limited))
            # htmx swaps only 2xx and 422 (see base.html), so it gets the form with the message as a 422.
            template = "workloads/_form.html" if _partial(request) else "workloads/new.html"
            response = render(request, template, page, status=422 if _partial(request) else 429)
            response["Retry-After"] = str(limited.retry_after)
            return response
    if request.method == "POST" and form.is_valid():
        try:
            workload = _submit(request.user, form)
        except services.SubmitRejected as rejected:
            form.add_service_errors(rejected.errors)
        except services.QueueForbidden as forbidden:
            form.add_error("queue", str(forbidden))
        else:
            messages.success(request, f"Submitted {workload.name}.")
            if request.htmx:  # type: ignore[attr-defined]
                return HttpResponseClientRedirect(workload.get_absolute_url())
            return redirect(workload)
    template = "workloads/_form.html" if _partial(request) else "workloads/new.html"
    # 422 for a form with errors: htmx swaps it in (see the htmx-config in base.html), browsers show it.
    return render(request, template, page, status=422 if form.errors else 200)


def _check(
    request: HttpRequest, form: TrainingForm | BatchScriptForm | NotebookForm | VMForm, page: dict[str, Any]
) -> HttpResponse:
    """The form's Check button: where the submission would land (the worker's dry run), shown under the form,
    recording and counting nothing; a refusal shows on the form's fields as a submit's would."""
    if form.is_valid():
        try:
            page["check"] = preview.ask(request.user, form.to_request())
        except services.SubmitRejected as rejected:
            form.add_service_errors(rejected.errors)
        except services.QueueForbidden as forbidden:
            form.add_error("queue", str(forbidden))
    template = "workloads/_form.html" if _partial(request) else "workloads/new.html"
    return render(request, template, page, status=422 if form.errors else 200)


def _element_counts(workload: Workload) -> dict[str, int]:
    """An array's elements by state (one query); {} for anything else."""
    if not workload.is_array:
        return {}
    rows = workload.elements.values_list("state").annotate(n=Count("pk")).order_by("state")
    return {state: n for state, n in rows}


@login_required
def workload_detail(request: HttpRequest, pk: UUID) -> HttpResponse:
    workload = access.access_workload(request.user, pk)
    can_manage = access.can_manage(request.user, workload)
    context = {
        "w": workload,
        "events": workload.events.select_related("actor"),
        "can_manage": can_manage,
        "can_extend": can_manage and workload.extendable,
        "elements": _element_counts(workload),
        "can_connect": access.may_connect(request.user, workload),
        "can_share": access.may_share(request.user, workload),
        "server_label": notebook_endpoint.label(workload),
    }
    template = "workloads/_status.html" if _partial(request) else "workloads/detail.html"
    return render(request, template, context)


@login_required
@require_POST
def workload_cancel(request: HttpRequest, pk: UUID) -> HttpResponse:
    workload = access.access_workload(request.user, pk)
    try:
        services.check_cancel(request.user, workload)
    except PermissionDenied:
        return HttpResponse("You may not cancel this workload.", status=403)
    services.do_cancel(request.user, workload)
    if request.htmx:  # type: ignore[attr-defined]
        return workload_detail(request, pk)
    return redirect(workload)


@login_required
@require_POST
def workload_share(request: HttpRequest, pk: UUID) -> HttpResponse:
    """The owner shares the workload's server with the team (`shared=1`) or stops (`shared=0`)."""
    workload = access.access_workload(request.user, pk)
    try:
        sharing.check_share(request.user, workload)
    except PermissionDenied:
        return HttpResponse("Only its owner may share a workload's server.", status=403)
    if request.POST.get("shared") not in ("0", "1"):
        return HttpResponse("Send shared=1 to share with the team, shared=0 to stop.", status=400)
    shared = request.POST["shared"] == "1"
    sharing.do_share(request.user, workload, shared)
    if request.htmx:  # type: ignore[attr-defined]
        return workload_detail(request, pk)
    messages.success(request, "Shared with your team." if shared else "No longer shared with your team.")
    return redirect(workload)


@login_required
@require_POST
def workload_extend(request: HttpRequest, pk: UUID) -> HttpResponse:
    """Extend a lease: htmx gets the outcome as one line (422 when refused), a plain form post the page."""
    workload = access.access_workload(request.user, pk)
    form = ExtendForm(request.POST)
    error = ""
    if not form.is_valid():
        error = " ".join(str(message) for messages in form.errors.values() for message in messages)
    else:
        try:
            workload = services.extend(request.user, workload, form.cleaned_data["hours"])
        except PermissionDenied:
            return HttpResponse("You may not extend this lease.", status=403)
        except services.SubmitRejected as rejected:
            error = " ".join(message for messages in rejected.errors.values() for message in messages)
        except services.CannotExtend as cannot:
            error = str(cannot)
    if _partial(request):
        context = {"w": workload, "error": error}
        return render(request, "workloads/_extended.html", context, status=422 if error else 200)
    if error:
        messages.error(request, f"Not extended: {error}")
    else:
        messages.success(request, f"Extended the lease of {workload.name}.")
    return redirect(workload)


@login_required
def workload_log(request: HttpRequest, pk: UUID) -> HttpResponse:
    """The whole output, a page at a time (`?offset=` in bytes; the last page by default)."""
    workload = access.access_workload(request.user, pk)
    try:
        offset: int | None = max(0, int(request.GET["offset"])) if "offset" in request.GET else None
    except ValueError:
        offset = None
    context = {"w": workload, "page": logs.page(workload, offset)}
    return render(request, "workloads/log.html", context)


@login_required
def workload_log_download(request: HttpRequest, pk: UUID) -> StreamingHttpResponse:
    """The whole output as a text file, streamed as it is read from the fabric."""
    workload = access.access_workload(request.user, pk)
    response = StreamingHttpResponse(logs.stream(workload), content_type="text/plain; charset=utf-8")
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in workload.name)
    response["Content-Disposition"] = f'attachment; filename="{safe}-{workload.pk}.log"'
    response["Cache-Control"] = "no-store"
    return response

"""A team dashboard drawn in Chromium on a cold cache over loopback (goal: under 1 s), as production serves it
(gunicorn; plotly.js's basic bundle; static files collected with compressed copies under content-hashed names,
cached for a year by whitenoise), side by side with the page as it was served before: the full plotly bundle
straight from the apps, uncompressed, on a short cache. Parsing plotly is most of a cold draw, so the basic
bundle (a quarter of the full one) is what moves it; compression cuts the bytes.

    cold   a new browser context per round (empty cache): navigation start -> every chart drawn
    warm   the same context reloaded: the script comes from the cache

Each round alternates the two servers, so a busy machine slows both alike; the table gives medians and the
ratio production / embedded, and how many bytes the browser fetched for the charts' script.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup
from bench.bench_submit import gunicorn

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 7
SECRET = "bench-draw-secret-key-not-for-production-0123456789abcdef"  # noqa: S105 (the bench's own servers)
DRAWN = """() => {
  const plots = document.querySelectorAll('.plot');
  return plots.length > 0 && [...plots].every(p => p.querySelector('.main-svg'));
}"""


def _seed() -> tuple[str, str]:
    """The demo cast with two days of hourly rollups for vision; returns a session id for alice (a lead's view
    of her own team is what is drawn) and the dashboard's path."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Queue
    from portal.usage.models import UsageRollup

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    vision, train = ResourceGroup.objects.get(slug="vision"), Queue.objects.get(slug="train")
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageRollup.objects.bulk_create(
        UsageRollup(
            group=vision,
            queue=train,
            hour=now - timedelta(hours=back),
            gpu_hours=2 + back % 5,
            idle_gpu_hours=back % 2,
            reserved_gpu_hours=4.0,
            pending_gpu_hours=back % 3,
            started=1,
            wait_p50_s=60.0 * (back % 7),
            wait_p95_s=600.0 + 60 * (back % 11),
        )
        for back in range(48)
    )
    alice = get_user_model().objects.get(username="alice")
    session = SessionStore()
    # The OIDC backend: present in production and embedded settings alike, so one session serves both.
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(alice.pk), "portal.accounts.oidc.Backend"
    session[HASH_SESSION_KEY] = alice.get_session_auth_hash()
    session.create()
    return str(session.session_key), f"/teams/{vision.slug}/"


def _env(production: bool, static_root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "GRIDLANE_DEMO")}
    env |= {"DJANGO_SETTINGS_MODULE": "bench.settings", "GRIDLANE_SECRET_KEY": SECRET, "PYTHONPATH": str(ROOT),
            "GRIDLANE_VAR_DIR": str(static_root.parent), "GRIDLANE_LOG_LEVEL": "WARNING",
            "GRIDLANE_SSL_REDIRECT": "0"}  # fmt: skip
    if not production:  # as before: static files from the apps, the full bundle
        env |= {"GRIDLANE_DEMO": "1", "GRIDLANE_PLOTLY_BUNDLE": "full"}
    return env


def _draw(browser: Any, url: str, session: str) -> tuple[float, float, int]:
    """Cold and warm draw times (ms) of one new context, and the bytes fetched for the plotly script cold."""
    context = browser.new_context()
    context.add_cookies([{"name": "sessionid", "value": session, "url": url}])
    page = context.new_page()
    fetched = 0

    def count(response: Any) -> None:
        nonlocal fetched
        if "plotly" in response.url:
            fetched += int(response.headers.get("content-length") or len(response.body()))

    page.on("response", count)
    page.goto(url)
    page.wait_for_function(DRAWN, timeout=60_000)
    cold = float(page.evaluate("performance.now()"))
    page.remove_listener("response", count)
    page.reload()
    page.wait_for_function(DRAWN, timeout=60_000)
    warm = float(page.evaluate("performance.now()"))
    context.close()
    return cold, warm, fetched


def run() -> dict[str, Any]:
    os.environ.setdefault("GRIDLANE_SECRET_KEY", SECRET)
    django_setup()
    from playwright.sync_api import sync_playwright

    session, path = _seed()
    static_root = ROOT / "var" / "bench-draw" / "static"
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"],
                   env=_env(True, static_root), cwd=ROOT, check=True)  # fmt: skip
    argv = ["-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "bench.wsgi:application"]
    results: dict[str, dict[str, list[float]]] = {s: {"cold": [], "warm": [], "bytes": []} for s in ("prod", "before")}
    with (
        gunicorn(argv, _env(True, static_root)) as prod,
        gunicorn(argv, _env(False, static_root)) as before,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        for _ in range(ROUNDS):
            for name, base in (("prod", prod), ("before", before)):
                cold, warm, fetched = _draw(browser, base + path, session)
                results[name]["cold"].append(cold)
                results[name]["warm"].append(warm)
                results[name]["bytes"].append(fetched)
        browser.close()
    summary = {
        name: {
            "cold_ms": statistics.median(r["cold"]),
            "warm_ms": statistics.median(r["warm"]),
            "script_bytes": statistics.median(r["bytes"]),
        }
        for name, r in results.items()
    }
    report(summary)
    return summary


def report(s: dict[str, dict[str, float]]) -> None:
    prod, before = s["prod"], s["before"]
    print(f"\nteam dashboard drawn in Chromium over loopback, median of {ROUNDS} rounds, servers alternating:")
    print(f"  {'':28} {'production':>12} {'before':>12} {'ratio':>8}")
    for key, label in (("cold_ms", "cold cache: charts drawn, ms"), ("warm_ms", "warm cache: charts drawn, ms"),
                       ("script_bytes", "plotly script fetched, bytes")):  # fmt: skip
        ratio = prod[key] / before[key] if before[key] else float("nan")
        print(f"  {label:28} {prod[key]:>12,.0f} {before[key]:>12,.0f} {ratio:>7.2f}x")
    verdict = "meets" if prod["cold_ms"] < 1000 else "MISSES"
    print(f"  goal: a cold-cache draw under 1,000 ms in production: {prod['cold_ms']:,.0f} ms ({verdict})")

"""The demo's batch-script queue, end to end: a script pasted on the script page runs as written on the local
fabric and its output shows on the workload's page. `paste_and_run` is the walk; run as a module, it migrates and
seeds the demo into the embedded SQLite database (no DATABASE_URL: tests/test_embedded_pages.py starts it in a
process of its own) and prints one JSON object of what it saw; tests/web/test_demo_scripts.py walks it on
PostgreSQL."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

SCRIPT = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --job-name=hello-demo\n#SBATCH --output=hello-%j.out\necho hi\n"


def paste_and_run(client: Any, timeout: float = 60.0) -> dict[str, Any]:
    """Paste SCRIPT to the demo's `scripts` queue as a person would, run the worker's cycle until it has
    finished, and read its page: what the script page said, the workload's state, name, runtime limit and
    fabric, its page and its --output file."""
    from portal.worker import tasks
    from portal.workloads.models import Workload
    from portal.workloads.states import FINISHED

    form = client.get("/workloads/new/script/").content.decode()
    data = {"queue": "scripts", "kind": "batch", "script": SCRIPT, "priority": "normal"}
    answer = client.post("/workloads/new/script/", data, HTTP_HX_REQUEST="true")
    w = Workload.objects.filter(name="hello-demo").first()
    if w is None:
        return {"form": form, "status": answer.status_code, "answer": answer.content.decode()[-3000:]}
    deadline = time.monotonic() + timeout
    while w.state not in FINISHED and time.monotonic() < deadline:
        tasks.cycle()
        w.refresh_from_db()
        time.sleep(0.1)
    root = w.fabric.resolved_settings()["root"] if w.fabric else ""
    out = os.path.join(root, str(w.run_id), "work", f"hello-{w.run_id}.out")
    return {
        "form": form,
        "status": answer.status_code,
        "state": w.state,
        "name": w.name,
        "runtime_limit_s": w.runtime_limit_s,
        "fabric": w.fabric.name if w.fabric else "",
        "native_kind": w.native_kind,
        "page": client.get(w.get_absolute_url()).content.decode(),
        "output_file": Path(out).read_text() if os.path.exists(out) else None,
    }


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    with open(os.devnull, "w") as quiet:
        call_command("migrate", "--no-input", verbosity=0, stdout=quiet)
        call_command("seed_demo", stdout=quiet)
    from django.db import connection

    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    seen = paste_and_run(client)
    json.dump(seen | {"vendor": connection.vendor}, sys.stdout)


if __name__ == "__main__":
    main()

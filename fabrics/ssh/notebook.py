"""Notebooks on a batch cluster (Slurm, PBS): a Jupyter server on the job's node that tells Gridlane where it is. Pure.

Gridlane cannot reach into a compute node to ask, so the job reports, as batchspawner's jobs do:
the portal puts a callback URL and a per-workload secret into the job's environment (quoted
exports), and `gridlane_notebook COMMAND...`, a shell function every notebook script carries,
starts the server on a free port with a random token, waits until its /api answers, and POSTs
`{"host", "port", "token", "path"}` to the callback with the secret. The server serves under the
workload's connect path (GRIDLANE_CONNECT_PREFIX, its base_url): the portal passes the user's browser
through to it there (portal.connect), adding the token, which no browser ever sees.

The token goes to the server in its environment (JUPYTER_TOKEN), never on a command line that
other users of the node could read; the callback's secret is taken out of the server's
environment before it starts, and out of the copy of the script Gridlane keeps for the record.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

ENDPOINT_URL_ENV = "GRIDLANE_ENDPOINT_URL"  # where the job reports its server
ENDPOINT_SECRET_ENV = "GRIDLANE_ENDPOINT_SECRET"  # noqa: S105 (a name: the per-workload secret it reports with)
SECRET_ENV = frozenset({ENDPOINT_SECRET_ENV})  # sent to the cluster, masked in the stored script
MASKED = "(not shown: sent to the cluster, not stored)"

CONNECT_VIA = ("direct", "ssh")  # how the portal reaches a job's server: the node itself, or via the login node

# Run by the job with python3: wait until the server answers, then report it (the callback may go through a proxy).
REPORT = """\
import json, os, sys, time, urllib.error, urllib.request
server, port = int(os.environ["GL_SERVER"]), int(os.environ["GL_PORT"])
local = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy to this node itself
deadline = time.monotonic() + float(os.environ.get("GRIDLANE_NOTEBOOK_START_S", "600"))
while True:  # until the server answers on /api (it does without a token)
    try:
        os.kill(server, 0)
    except OSError:
        sys.exit("gridlane: the Jupyter server ended before it answered")
    try:
        with local.open("http://127.0.0.1:%d%sapi" % (port, os.environ["GL_BASE"]), timeout=5) as answer:
            if answer.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("gridlane: the Jupyter server did not answer on /api in time")
    time.sleep(0.5)
body = {"host": os.environ["GL_HOST"], "port": port, "token": os.environ["GL_TOKEN"], "path": os.environ["GL_BASE"]}
request = urllib.request.Request(
    os.environ["GRIDLANE_ENDPOINT_URL"], data=json.dumps(body).encode(), method="POST",
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["GRIDLANE_ENDPOINT_SECRET"]},
)
for attempt in range(8):
    try:
        with urllib.request.urlopen(request, timeout=30):
            print("gridlane: the notebook listens on %s:%d" % (body["host"], port), file=sys.stderr)
            sys.exit(0)
    except urllib.error.HTTPError as error:
        if error.code < 500 and error.code != 429:
            sys.exit("gridlane: the portal refused the notebook address: %d %s" % (error.code, error.read()[:300]))
        said = error
    except OSError as error:
        said = error
    time.sleep(min(2 ** attempt, 30))
sys.exit("gridlane: could not report the notebook address: %s" % said)
"""

# The job's side, in every notebook script (fixed text: nothing of the user's is in it). python3 from
# the node's PATH, standard library only, picks the port and token and does the waiting and reporting;
# GRIDLANE_PYTHON, GRIDLANE_NOTEBOOK_HOST (the name the user's browser reaches the node by; default
# `hostname -f`) and GRIDLANE_NOTEBOOK_IP (what the server listens on) may be set by the queue's template.
FUNCTION = r"""# Gridlane's notebook launcher: `gridlane_notebook COMMAND...` runs COMMAND (a Jupyter server, such as
# `jupyter lab`) on a free port with a random token, reports where it listens once its /api answers,
# then waits on it.
gridlane_notebook() {
  local py=${GRIDLANE_PYTHON:-python3} port token host server root=()
  read -r port token < <("$py" -c 'import secrets, socket
s = socket.socket()
s.bind(("", 0))
print(s.getsockname()[1], secrets.token_urlsafe(32))') || { echo "gridlane: $py cannot pick a port" >&2; return 1; }
  host=${GRIDLANE_NOTEBOOK_HOST:-$(hostname -f 2>/dev/null || hostname)}
  [ "$(id -u)" = 0 ] && root=(--allow-root)
  local base=${GRIDLANE_CONNECT_PREFIX:-/}
  # Each session its own JupyterLab settings and workspaces, with Jupyter's news pop-up off.
  local lab=${GRIDLANE_JUPYTERLAB_DIR:-${TMPDIR:-/tmp}/gridlane-jupyterlab-${GRIDLANE_WORKLOAD_ID:-$$}}
  local news=$lab/settings/@jupyterlab/apputils-extension
  if mkdir -p -m 700 "$lab" && mkdir -p "$news" "$lab/workspaces"; then
    printf '{"fetchNews": "false", "checkForUpdates": false}\n' > "$news/notification.jupyterlab-settings"
    export JUPYTERLAB_SETTINGS_DIR=$lab/settings JUPYTERLAB_WORKSPACES_DIR=$lab/workspaces
  fi
  JUPYTER_TOKEN=$token env -u GRIDLANE_ENDPOINT_SECRET "$@" --no-browser --ip="${GRIDLANE_NOTEBOOK_IP:-0.0.0.0}" \
    --port="$port" --ServerApp.port_retries=0 --ServerApp.base_url="$base" --ServerApp.allow_remote_access=True \
    ${root[@]+"${root[@]}"} </dev/null &
  server=$!
  if ! GL_SERVER=$server GL_HOST=$host GL_PORT=$port GL_TOKEN=$token GL_BASE=$base "$py" -c "$_gl_notebook_report"; then
    kill "$server" 2>/dev/null
    wait "$server"
    return 1
  fi
  wait "$server"
}
"""
FUNCTION += f"_gl_notebook_report={shlex.quote(REPORT)}\n"


def check_connect_via(settings: Mapping[str, Any]) -> None:
    """`connect_via`: "direct" (the portal reaches the compute nodes) or "ssh" (through the login node)."""
    if settings.get("connect_via", "direct") not in CONNECT_VIA:
        raise ValueError('settings.connect_via: "direct" (the portal reaches the nodes) or "ssh" (via the login node)')

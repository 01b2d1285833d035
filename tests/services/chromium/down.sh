#!/usr/bin/env bash
# Nothing to stop: each browser test starts and closes its own Chromium.
exit 0

#!/usr/bin/env bash
# Nothing to stop: each test stops the Prometheus it started.
exit 0

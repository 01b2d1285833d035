#!/usr/bin/env bash
# Nothing to stop: each nginx is started and stopped by the test that needs it.
exit 0

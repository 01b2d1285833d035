#!/usr/bin/env bash
# Nothing to stop: each sshd is started and stopped by the test fixture that needs it.
exit 0

"""Notifications: each person's opt-in e-mail and webhook for their work's started, finished, failed, idle
warning and lease ending; recorded in an outbox by the worker and sent beside it, never in its way."""

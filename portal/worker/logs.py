"""The worker's log: django-q2 reports every task it queues, starts and finishes at INFO, which for the periodic
cycle is three lines every GRIDLANE_CYCLE_SECONDS. Those routine lines are DEBUG here; failures, starts and
stops of the cluster keep their level."""

from __future__ import annotations

import logging

# django-q2's words for the life of one task: "Enqueued [...]", "Process-1:1 processing 'cycle' ...",
# "Processed 'portal.worker.tasks.cycle' (cycle)".
ROUTINE = ("Enqueued [", " processing ", "Processed '")


class RoutineToDebug(logging.Filter):
    """Lower django-q2's per-task lines to DEBUG, and let them through only where DEBUG is wanted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and any(part in record.getMessage() for part in ROUTINE):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True

"""Named numbers that processes share through the database: counters and gauges (served on /metrics), the
cursors of periodic steps (when the usage rollup, retention or the notification outbox last ran), and requests
between processes (a step asked for while another process runs it). Below every app: it imports none."""

"""The embedded default fabric: workloads run as supervised subprocesses of the portal host."""

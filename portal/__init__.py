"""The Django side of Gridlane: identity, queues, workloads, the API, the web pages and the worker."""

"""Where workloads run: one adapter per kind of fabric behind the small interface in `base`."""

"""Kubernetes: workloads as batch/v1 Jobs from per-queue pod templates; Kueue and Volcano aware.

settings.py reads the fabric's settings, render.py (pure) makes the manifests, client.py is the one
seam to the cluster (the official client), parse.py (pure) reads what the API server answers, and
fabric.py puts them behind the Fabric protocol.
"""

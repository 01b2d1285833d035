"""The PBS tests use the Slurm test cluster's Torque wrappers (qsub, qstat, qdel) for their live part."""

from tests.fabrics.slurm.conftest import cluster, cluster_lock, people, slurm_settings  # noqa: F401

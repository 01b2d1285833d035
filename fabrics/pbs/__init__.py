"""The PBS fabric (PBS Pro / OpenPBS and Torque): qsub, qstat and qdel over SSH."""

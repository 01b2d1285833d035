"""The SSH side shared by the script fabrics (Slurm, PBS): settings, one persistent connection, batches."""

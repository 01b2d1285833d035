"""The Slurm fabric: sbatch, squeue, sacct, scancel and sinfo over SSH."""

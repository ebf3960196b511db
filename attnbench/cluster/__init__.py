"""SLURM: submit, the batch script, and the status of a submitted sweep."""

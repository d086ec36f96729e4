"""Inside Slurm jobs: the launcher that trains, records usage and checkpoints, and the probe's body."""

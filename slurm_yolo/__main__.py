"""``python -m slurm_yolo``: the admin and job-side CLI (what job scripts run)."""

from slurm_yolo.cli.admin import main

main()

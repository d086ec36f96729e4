"""``python -m slurm_yolo``: the admin and job-side CLI (what job scripts run)."""

from .cli.admin import main

main()

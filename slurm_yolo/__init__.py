"""slurm-yolo: token-budgeted, predictable YOLO training on shared Slurm GPU clusters."""

__version__ = "0.1.0"

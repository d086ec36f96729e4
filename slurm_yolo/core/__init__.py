"""What every role shares and that asks nothing of Slurm or the books: settings, errors, the billing policy, the time model."""

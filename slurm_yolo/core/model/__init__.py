"""The time model: a run's work in tokens, its predicted time, the fit and the priors."""

"""The time model: a run's work in pixels, its predicted time, the fit and the priors."""

"""slurmctld's side: the hooks, hookd, the settler, enforcement, feedback, the watchdog, admission."""

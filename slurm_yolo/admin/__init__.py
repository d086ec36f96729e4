"""Admins' hosts and cron: reports, alerts, the doctor, recalibration (imports only the shared layers)."""

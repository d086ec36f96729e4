"""The books and what is published from them: the ledger, calibration, SQLite files, the event log."""

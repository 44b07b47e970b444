"""The core: events, records, runs and their workers, estimates, the store and sweeps. No Textual, no framework."""

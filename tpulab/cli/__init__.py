"""The command line: headless runs, sweeps, results, detect and doctor."""

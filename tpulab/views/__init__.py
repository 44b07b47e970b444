"""What runs, sweeps and the runtime look like as Rich tables and text: shared by the command line and the lab."""

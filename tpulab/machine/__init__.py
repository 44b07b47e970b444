"""This machine: its accelerators detected, their peaks, the processes that hold them, a verdict."""

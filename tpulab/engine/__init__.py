"""The engine: a run's spec, its worker and recorder, sweeps, the store and its index, estimates,
ceilings and telemetry. No Textual, no framework (those load only in a worker's backend)."""

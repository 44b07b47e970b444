"""tpulab in a notebook: the Python API, results that draw themselves, live cells (the `notebook` extra)."""

"""The bottom layer: plain types and words every other layer shares (events, errors, timing, basis,
charts, formatting, the glossary, the plugin loader). It imports nothing else of tpulab."""

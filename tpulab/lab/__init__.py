"""The lab: the Textual app, its screens and widgets."""

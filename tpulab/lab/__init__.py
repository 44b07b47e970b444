"""The lab: the Textual app, its panes and widgets."""

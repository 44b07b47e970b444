"""A line of text that changes many times a second: a run's header, with its step count and ETA."""

from __future__ import annotations

from textual.visual import VisualType
from textual.widgets import Static


class StatusLine(Static):
    """A Static that lays the screen out again only when its height changes.

    `Static.update` lays out the whole lab (its height is auto, so it might have grown): ~30 ms of a core here, at
    each of a run's progress messages, taken from the cores the run may be measuring. Out of sight (no width), it
    waits for the layout that showing it brings.
    """

    def say(self, content: VisualType) -> None:
        width, height = self.content_size
        self.update(content, layout=False)
        if width and self.get_content_height(self.content_size, self.app.size, width) != height:
            self.refresh(layout=True)  # it wraps onto more lines, or fewer

"""Text from outside made safe for where it is shown: shown, never obeyed.

Records (an import is anyone's file), plugins, model files, device names and framework errors come
from elsewhere. On a terminal a control character is a command (ESC starts a sequence that retitles,
recolours or writes; C1 controls do the same in one byte) and Rich reads `[bold]` as markup; in HTML
`<` starts a tag. Every view passes such text through one of these, for its medium.
"""

from __future__ import annotations

import html as _html
import re

from rich.markup import escape
from rich.text import Text

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but newline and tab, DEL, C1


def _shown(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def visible(text: object) -> str:
    """`text` with each control character (newline and tab kept) written out as '\\x1b': the same for every medium,
    so a width counted on it is the width shown."""
    return CONTROL.sub(_shown, str(text))


def markup(text: object) -> str:
    """`text` to place in a line of Rich markup: visible, and whatever looks like a tag printed as written."""
    return escape(visible(text))


def text(value: object, style: str = "") -> Text:
    """`value` as a Rich Text (a table cell, a line): visible, never read as markup."""
    return Text(visible(value), style=style)


def html(text: object) -> str:
    """`text` for HTML: visible, and escaped (quotes too: it may sit in an attribute)."""
    return _html.escape(visible(text))

"""Text from outside made safe for where it is shown: shown, never obeyed.

Records (an import is anyone's file), plugins, model files, device names and framework errors come
from elsewhere. On a terminal a control character is a command (ESC starts a sequence that retitles,
recolours or writes; C1 controls do the same in one byte) and Rich reads `[bold]` as markup; in HTML
`<` starts a tag; a bidirectional override (U+202E and its kin) makes text read in another order than
it is stored, the trick behind "Trojan Source". Every view passes such text through one of these, for its
medium.
"""

from __future__ import annotations

import html as _html
import re

from rich.markup import escape
from rich.text import Text

# C0 but newline and tab, DEL, C1; the bidirectional embeddings, overrides and isolates
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` with each control character (newline and tab kept) written out as '\\x1b' (a bidirectional
    control as '\\u202e'): the same for every medium, so a width counted on it is the width shown."""
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

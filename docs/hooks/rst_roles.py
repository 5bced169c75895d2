"""MkDocs hook: the package's docstrings are written with reStructuredText roles (``:func:`x```,
``:class:`~a.b.C```) and ``::`` literal-block markers, which Markdown shows verbatim. On the rendered
pages the role prefix is dropped (``~`` keeps the last dotted component, as Sphinx shows it) and a
paragraph ending in ``::`` ends in ``:``. Only rendered HTML changes; nothing is imported."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|class|data|mod|meth|attr|obj|exc|const|ref|py:\w+):<code>(~?)([^<]*)</code>")
_LITERAL = re.compile(r"::</p>")


def _role(match: re.Match) -> str:
    text = match.group(2)
    if match.group(1):
        text = text.rsplit(".", 1)[-1]
    return f"<code>{text}</code>"


def on_page_content(html: str, **kwargs) -> str:
    return _LITERAL.sub(":</p>", _ROLE.sub(_role, html))

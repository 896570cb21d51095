"""Display tables (DataFrames of formatted strings) -> HTML ``<table>`` or Markdown pipe table.

Both renderings of a table show exactly the same cells; numeric columns are
right-aligned in both, and long free-text columns may wrap. A table names extra
``right``-aligned and ``wrap``-ping columns in ``df.attrs``.
"""

from __future__ import annotations

import html

import pandas as pd

# Columns whose cells are numbers (right-aligned).
_NUMERIC = {
    "Pool",
    "Baseline ns",
    "Candidate ns",
    "Reduction",
    "CI",
    "Faster in",
    "CV % (b/c)",
    "A/A ±",
    "Difference",
    "Half-width",
    "Last vs first",
    "Headline CI ±",
    "Candidate reduction",
    "Bound reduction",
    "Gap closed",
    "Processes",
    "Samples",
    "Median ns",
    "Process range ns",
    "Positions",
    "Gates passed",
}


#: Columns that may wrap (long free text); every other cell stays on one line.
_WRAP = {"Use", "CPU", "Build", "Load avg (start → end)"}


def _wraps(df: pd.DataFrame, col: str) -> bool:
    # Free-text columns, and the columns a table marks in ``attrs["wrap"]``.
    return col in _WRAP or col in df.attrs.get("wrap", ())


def _is_numeric(df: pd.DataFrame, col: str) -> bool:
    return (
        col in _NUMERIC
        or col in df.attrs.get("right", ())
        or col.endswith(" CI")
        or "CI" in col.split()
        or col.startswith("Gap closed")
        or col.startswith("Bound saves")
    )


def to_html(df: pd.DataFrame, *, empty: str = "No data.") -> str:
    """Render a display table as an HTML ``<table>`` (numbers right-aligned).

    Parameters
    ----------
    df
        A display table (``df.attrs`` may name extra ``right``-aligned and
        ``wrap``-ping columns).
    empty
        Text shown instead of an empty table.

    Returns
    -------
    str
    """
    if df.empty:
        return f'<p class="kvq-empty"><em>{html.escape(empty)}</em></p>'

    def cell(tag: str, col: str, text: str) -> str:
        align = "right" if _is_numeric(df, col) else "left"
        cls = ' class="kvq-wrap"' if _wraps(df, col) and tag == "td" else ""
        return f'<{tag}{cls} style="text-align:{align}">{html.escape(text)}</{tag}>'

    head = "".join(cell("th", c, c) for c in df.columns)
    body = "\n".join(
        "<tr>"
        + "".join(cell("td", c, str(v)) for c, v in zip(df.columns, row, strict=True))
        + "</tr>"
        for row in df.itertuples(index=False)
    )
    return (
        '<table class="kvq-table">\n'
        f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"
    )


def _md_cell(value: object) -> str:
    # "|" would end a cell in GFM; a line break would end the row.
    return " ".join(str(value).split()).replace("|", "\\|")


def to_markdown(df: pd.DataFrame, *, empty: str = "No data.") -> str:
    """Render a display table as a GitHub-flavoured Markdown pipe table.

    Cells are not padded to a common width (GitHub aligns the rendered table; padding
    would double the size of a long table); numbers are right-aligned.

    Parameters
    ----------
    df
        A display table.
    empty
        Text used instead of an empty table.

    Returns
    -------
    str
    """
    if df.empty:
        return f"_{empty}_"
    align = ["---:" if _is_numeric(df, c) else ":---" for c in df.columns]
    lines = [
        "| " + " | ".join(_md_cell(c) for c in df.columns) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += [
        "| " + " | ".join(_md_cell(v) for v in row) + " |" for row in df.itertuples(index=False)
    ]
    return "\n".join(lines)

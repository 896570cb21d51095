"""HTML sections of the report: heading, explanatory note and table(s) per topic.

The notebook displays these strings; the cells themselves come from :mod:`kvqueue.tables`
(so the HTML and the Markdown writeup show the same numbers).
"""

from __future__ import annotations

import html

import pandas as pd

from kvqueue import processed
from kvqueue.tables import (
    CASE_CYCLES,
    CASE_TITLES,
    HEADLINE_CASES,
    aa_summary,
    aa_table,
    case_note,
    ci_header,
    environment_table,
    floor_gap_table,
    headline_note,
    ns_table,
    order_summary,
    order_table,
    present_cases,
    results_table,
    runs_note,
    runs_table,
    to_html,
    variants_table,
)

#: Style for the report tables (display once, before the first table).
CSS = """<style>
table.kvq-table { border-collapse: collapse; font-size: 12.5px; margin: 0.4em 0 1.2em 0; }
table.kvq-table th, table.kvq-table td { white-space: nowrap; padding: 3px 6px; }
table.kvq-table td.kvq-wrap { white-space: normal; overflow-wrap: anywhere; min-width: 10em; }
p.kvq-note { max-width: 75em; }
</style>"""


def section_html(title: str, df: pd.DataFrame, note: str = "", *, level: int = 3) -> str:
    """A heading, an optional note (plain text, may contain ``code`` spans) and a table."""
    parts = [f"<h{level}>{html.escape(title)}</h{level}>"]
    if note:
        parts.append(f'<p class="kvq-note">{_inline_code(note)}</p>')
    parts.append(to_html(df))
    return "\n".join(parts)


def _inline_code(text: str) -> str:
    # Minimal Markdown: `code` spans only, everything else escaped.
    pieces = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def headline_intro(data: processed.Processed) -> str:
    """HTML paragraph with :func:`headline_note`."""
    return f'<p class="kvq-note">{html.escape(headline_note(data))}</p>'


def case_section(data: processed.Processed, case: str, *, phase: str = "main") -> str:
    """HTML section (heading, note, table) for one headline case."""
    return section_html(
        CASE_TITLES.get(case, case),
        results_table(data, [case], phase=phase),
        case_note(case, data),
    )


def runs_section(data: processed.Processed) -> str:
    """HTML: every run found and its use in the report."""
    return section_html("Runs", runs_table(data), runs_note(data), level=2)


def other_cases_section(data: processed.Processed) -> str:
    """HTML: the non-headline cases of the main phase in one table."""
    cases = [c for c in present_cases(data, "main") if c not in HEADLINE_CASES]
    notes = "; ".join(f"{c}: {CASE_CYCLES.get(c, c)}" for c in cases)
    return section_html("Other cases", results_table(data, cases), notes, level=2)


def confirm_section(data: processed.Processed) -> str:
    """HTML: the confirmation run (fresh processes repeating some cases)."""
    cases = present_cases(data, "confirm")
    note = (
        "A second set of fresh worker processes, run after the main phase, repeats these "
        "cases; the statistics are computed the same way and independently of the main phase."
    )
    return section_html(
        "Confirmation run", results_table(data, cases, phase="confirm"), note, level=2
    )


def floor_gap_section(data: processed.Processed) -> str:
    """HTML: how much of the gap to the lower bound each comparison closes ('' if none)."""
    gap = floor_gap_table(data)
    if gap.empty:
        return ""
    bounds = ", ".join(sorted(data.floor_gap["bound"].dropna().unique()))
    note = (
        f"The lower bound ({bounds}: the same operations with every check removed) is a "
        "bound, not a candidate. Gap closed = (m_baseline − m_candidate) / "
        "(m_baseline − m_bound), computed as candidate reduction / bound reduction with "
        f"a {ci_header(data.settings.confidence)} from a bootstrap over processes "
        "(main phase); 100% would mean the candidate is as fast as the bound, a negative "
        "share that it is slower than the baseline. 'Bound saves' is the size of the gap; "
        "where it is only a few percent, the share is imprecise (wide CI). n/a when the "
        "bound is not clearly faster than the baseline."
    )
    return section_html("Gap to the lower bound", gap, note, level=2)


def noise_section(data: processed.Processed) -> str:
    """HTML: A/A noise floor (if measured) and the order-effect check."""
    parts = ["<h2>Noise</h2>"]
    aa = aa_table(data)
    if not aa.empty:
        note = (
            "The same source measured twice as two variants: any 'difference' is noise, so "
            "the CI must contain 0. Its half-width is shown beside the real results (column "
            f"A/A ±). {aa_summary(data)}"
        )
        parts.append(
            f'<h3>Noise floor (A/A)</h3>\n<p class="kvq-note">{html.escape(note)}</p>\n'
            + details(to_html(aa), summary=f"Table: A/A comparisons ({len(aa)} cells)")
        )
    else:
        parts.append(
            '<h3>Noise floor (A/A)</h3><p class="kvq-note">No headline run has an A/A '
            "pair (collect one with AA=1).</p>"
        )
    parts.append(
        "<h3>Order effect</h3>"
        f'<p class="kvq-note">{html.escape(order_summary(data))}</p>'
        + details(
            '<p class="kvq-note">Per process: least-squares slope of log time against the '
            "variant's position in its round (variant levels removed), shown as the change "
            "from the first to the last position (median over processes) with its bootstrap "
            "CI. WARNING marks cells where the CI excludes 0 and the effect is larger than the "
            "tightest comparison CI half-width of the cell.</p>" + to_html(order_table(data)),
            summary="Table: order effect per cell",
        )
    )
    return "\n".join(parts)


def ns_section(data: processed.Processed) -> str:
    """HTML: ns per cycle per variant (collapsible, it is long)."""
    return details(
        to_html(ns_table(data)), summary="Table: median ns per cycle per variant (main phase)"
    )


def environment_section(data: processed.Processed) -> str:
    """HTML: machine, interpreter and variant provenance of the headline runs."""
    return "\n".join(
        [
            section_html("Machines and interpreters", environment_table(data)),
            section_html(
                "Variants",
                variants_table(data),
                "sha256 prefixes of the class source and of the file it was cut from; the "
                "full digests are in data/processed/variants.csv.",
            ),
        ]
    )


def details(body: str, *, summary: str) -> str:
    """Wrap HTML in a collapsible ``<details>`` (works without JavaScript)."""
    return f"<details><summary>{html.escape(summary)}</summary>\n{body}\n</details>"

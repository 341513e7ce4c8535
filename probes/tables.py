"""Plain-text and Markdown tables for the commands' output, rendered by Rich (mlx-free).

Every table slabscope prints (``compare``, ``whatif`` and its sizing, the ranks' imbalance, the report's Markdown)
goes through ``render_table``: Rich lays the columns out (widths from the widest cell, right-aligned numbers) in a
terminal style, or as a Markdown pipe table (``rich.box.MARKDOWN``). No colour and no wrapping: the output is read
by people and by scripts that grep it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

WIDE = 10_000  # a console wider than any table: Rich never wraps or squeezes a cell


@dataclass(frozen=True)
class Column:
    header: str
    right: bool = False  # right-aligned (numbers)


def _plain_box():
    """Rich's SIMPLE_HEAD drawn in ASCII: a rule of dashes under the header and nothing else."""
    from rich.box import Box

    return Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def render_table(columns: tuple[Column, ...] | list[Column], rows: list[tuple], markdown: bool = False,
                 indent: int = 0) -> str:
    """``rows`` (one tuple of cells per row, as strings) under ``columns``: terminal style (header, a rule, the
    rows) or a Markdown table; every line prefixed by ``indent`` spaces."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.MARKDOWN if markdown else _plain_box(), show_edge=markdown, pad_edge=markdown,
                  padding=(0, 1), collapse_padding=not markdown)
    cell = (lambda text: str(text).replace("|", "\\|")) if markdown else str  # a bar would end a Markdown cell
    for column in columns:
        table.add_column(cell(column.header), justify="right" if column.right else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(cell(value) for value in row))
    out = io.StringIO()
    Console(file=out, width=WIDE, color_system=None, force_terminal=False, legacy_windows=False,
            emoji=False, markup=False, highlight=False).print(table)
    lines = [line.rstrip() for line in out.getvalue().splitlines() if line.strip()]
    return "\n".join(" " * indent + line for line in lines)

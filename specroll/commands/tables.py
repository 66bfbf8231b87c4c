"""Tables the commands print: drawn boxes on a terminal, Markdown elsewhere.

A drawn table fits itself to the terminal's width; written to a file or a pipe it is cut to 80
columns and its cells to `1.…`. So off a terminal every table is Markdown, each figure whole.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


@dataclass
class TextTable:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append(list(cells))

    def markdown(self) -> str:
        lines = [f"**{self.title}**", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.columns))) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines + ([f"\n{self.caption}"] if self.caption else []))


def print_table(table: TextTable, is_terminal: bool | None = None) -> None:
    """`table` as a rich table on a terminal (stdout), else as Markdown."""
    if not (sys.stdout.isatty() if is_terminal is None else is_terminal):
        print(table.markdown())
        return
    from rich.console import Console
    from rich.table import Table

    drawn = Table(title=table.title, caption=table.caption or None)
    for i, column in enumerate(table.columns):
        drawn.add_column(column, justify="left" if i == 0 else "right")
    for row in table.rows:
        drawn.add_row(*row)
    Console().print(drawn)

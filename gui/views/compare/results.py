"""The compare window's results, drawn from the comparison (gui.sessions.compare) they are given: the summary
table with its exports and the diff of a setting's output against plain decoding (with the divergence diagnosis),
held by ResultsPane.

Renders only; computes no figure (they are engine.measure.compare's). Exports are asked for by a signal.
May touch: QtWidgets / QtGui, gui.theme, the compare parts' cell texts.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QTextCursor
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QPushButton, QTableWidget,
                               QTableWidgetItem, QTextEdit, QVBoxLayout, QWidget)

from engine.core.events import TokenStatus
from engine.measure.baselines import baseline_backend
from engine.measure.compare import BASELINE_MISSING, ComparisonRow
from gui import theme
from gui.sessions.compare import word_diff
from gui.views.compare.parts import identical_text, row_title, times_text
from gui.views.live.stats import DASH

COLUMNS = ("setting", "tok/s", "speed-up", "acceptance", "mean acc. length", "theory", "efficiency",
           "draft / verify time", "identical to plain", "vs fastest plain")
SPEEDUP, IDENTICAL, CROSS = 2, 8, 9  # CROSS: shown only where plain decoding ran on several backends (or a server's)
COLUMN_TIPS = ("SPEC of the setting", "committed tokens per second after the first",
               "tok/s / tok/s of plain decoding on the same backend, dtype and device, on this prompt, in this run",
               "accepted drafted tokens / drafted tokens", "mean accepted length: committed tokens per target pass",
               "theoretical speed-up from α, k and the cost ratio (Leviathan et al. 2023, eq. 1)",
               "measured speed-up / theoretical speed-up", "seconds drafting / seconds verifying",
               "greedy: whether the output is plain decoding's (on the same backend), token for token",
               "tok/s / tok/s of the fastest plain decoding in this run, on any backend (the cross-backend "
               "picture, not an equality claim)")
ROOM_FOR_ROWS = 5  # plain decoding and four settings without scrolling (the settings area's MAX_SETTINGS)
EXPORT_FILTERS = {"csv": "CSV (*.csv)", "json": "JSON (*.json)", "png": "PNG image (*.png)",
                  "sweep-csv": "CSV (*.csv)", "sweep-json": "JSON (*.json)", "sweep-png": "PNG image (*.png)"}


def run_state_text(run, row: ComparisonRow | None) -> str:
    """A run pane's state: the verdict against plain once done, else where it is."""
    if run.state == "done" and row is not None and not row.is_baseline:
        return identical_text(row)
    if run.state == "done" and row is not None:
        return "reference"
    return {"waiting": "waiting", "running": "running…", "stopped": "stopped", "failed": "failed",
            "done": "done"}[run.state]


def show_rows(table: QTableWidget, rows: list[ComparisonRow], palette: theme.Palette) -> None:
    """The summary table: one row per run, plain decoding first (on each backend used: each setting's speed-up
    and equality are judged against its own backend's, and say which; "vs fastest plain", shown only then or
    beside a server's row, is the cross-backend figure)."""
    table.setRowCount(len(rows))
    several = len({row.baseline for row in rows if row.baseline}) > 1
    table.setColumnHidden(CROSS, not several and all(row.baseline for row in rows))
    for r, row in enumerate(rows):
        cells = (
            row_title(row, several),
            f"{row.tok_per_s:.1f}",
            speedup_text(row, several),
            DASH if not row.spec.speculative and not row.stats.drafted_tokens else f"{row.acceptance_rate:.0%}",
            f"{row.mean_accepted_length:.2f}",
            f"{row.theoretical_speedup:.2f}×",
            DASH if row.efficiency is None or not row.spec.speculative else f"{row.efficiency:.0%}",
            times_text(row),
            "reference" if row.is_baseline else identical_text(row),
            DASH if row.vs_fastest_plain is None else f"{row.vs_fastest_plain:.2f}×",
        )
        for c, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if 0 < c < IDENTICAL or c == CROSS:
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if c == SPEEDUP:
                measured = "" if row.baseline.endswith(BASELINE_MISSING) else ", measured in this run"
                item.setToolTip(f"against {row.baseline}{measured}" if row.baseline else
                                "a server's run has no plain decoding of its own: see vs fastest plain")
            if c == IDENTICAL and row.identical_to_plain is False:
                near_tie = row.equality == "near-tie"
                item.setForeground(QColor(palette.warning if near_tie else palette.error))
                item.setToolTip(row.divergence.explanation() if row.divergence is not None else
                                "Greedy output differs from plain decoding; select the row to see the diff")
            item.setData(Qt.ItemDataRole.UserRole, r)
            table.setItem(r, c, item)


def speedup_text(row: ComparisonRow, several: bool) -> str:
    """"1.06×", or "0.84× vs transformers" where plain decoding ran on several backends."""
    if row.speedup is None:
        return DASH
    backend = baseline_backend(row.baseline)
    return f"{row.speedup:.2f}× vs {backend}" if several and not row.is_baseline and backend else f"{row.speedup:.2f}×"


def render_diff(view: QTextEdit, p: theme.Palette, session, plain: ComparisonRow, row: ComparisonRow | None,
                rows: list[ComparisonRow]) -> None:
    """`row`'s output against plain decoding's (None: every setting's verdict in one line). `session`: the
    comparison (gui.sessions.compare.ComparisonSession) the rows come from."""
    view.clear()
    cursor = QTextCursor(view.document())
    if row is None:
        if session is not None and not session.greedy:
            cursor.insertText("Sampling (temperature > 0): outputs are not expected to match plain "
                              "decoding token for token, so they are not compared.",
                              theme.text_format(p, dim=True))
        elif len(rows) > 1:
            where = " in float32 on the CPU (strict check)" if session and session.strict else ""
            settings = [r for r in rows if not r.is_baseline]
            own = " on its own backend" if len({r.baseline for r in rows if r.baseline}) > 1 else ""
            cursor.insertText(f"✓ All {len(settings)} settings: output identical to plain decoding{own}{where}, "
                              "token for token. Speculation changed nothing.", theme.text_format(p, bold=True))
        return
    if row.identical_to_plain:
        cursor.insertText(f"✓ {row.label}: identical to plain decoding, token for token "
                          f"({row.stats.committed_tokens} tokens).", theme.text_format(p, bold=True))
        return
    if row.identical_to_plain is None:
        cursor.insertText(f"{row.label}: sampled output (not compared with plain decoding).",
                          theme.text_format(p, dim=True))
        return
    near_tie = row.equality == "near-tie"
    cursor.insertText(f"{'≈' if near_tie else '✗'} {row.label} differs from plain decoding at token "
                      f"{row.first_difference} (of {len(plain.output_ids)} / {len(row.output_ids)}).",
                      theme.text_format(p, bold=True, color=p.warning if near_tie else p.error))
    cursor.insertBlock()
    if row.divergence is not None:
        insert_divergence(cursor, row.divergence, p)
    cursor.insertText("struck through: only in plain · underlined: only in this setting",
                      theme.text_format(p, small=True, dim=True))
    cursor.insertBlock()
    cursor.insertBlock()
    only_plain = theme.token_format(p, TokenStatus.REJECTED)
    only_plain.setForeground(QColor(p.error))
    only_other = theme.token_format(p, TokenStatus.SUBSTITUTED)
    for op, text in word_diff(plain.text, row.text):
        fmt = {"equal": theme.text_format(p), "plain": only_plain, "other": only_other}[op]
        cursor.insertText(text, fmt)
    view.moveCursor(QTextCursor.MoveOperation.Start)


def insert_divergence(cursor: QTextCursor, divergence, p: theme.Palette) -> None:
    """A near-tie in one sentence; a mismatch loudly, with what is needed to report it."""
    if divergence.is_near_tie:
        cursor.insertText(divergence.explanation() + " “Prove it in float32” checks the algorithm itself.",
                          theme.text_format(p))
    else:
        cursor.insertText(divergence.explanation(), theme.text_format(p, bold=True, color=p.error))
    cursor.insertBlock()


class ResultsPane(QWidget):
    """The summary table (one row per run) with its exports, beside the diff against plain decoding."""

    selection_changed = Signal()  # a row of the table was selected
    export_requested = Signal(str)  # csv | json | png

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        layout.addWidget(self._table_column(), 5)
        self.diff_view = QTextEdit()
        self.diff_view.setObjectName("transcript")
        self.diff_view.setReadOnly(True)
        self.diff_view.setPlaceholderText("The difference from plain decoding shows here.")
        layout.addWidget(self.diff_view, 2)

    def _table_column(self) -> QWidget:
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setColumnHidden(CROSS, True)  # shown by show_rows where plain decoding ran on several backends
        for c, tip in enumerate(COLUMN_TIPS):
            self.table.horizontalHeaderItem(c).setToolTip(tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.table.itemSelectionChanged.connect(self.selection_changed)
        self.table.setMinimumHeight(self.table.verticalHeader().defaultSectionSize() * ROOM_FOR_ROWS
                                    + self.table.horizontalHeader().sizeHint().height() + 6)
        column = QVBoxLayout()
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.table, 1)
        export_row = QHBoxLayout()
        export_row.addStretch(1)
        for text, kind in (("Export CSV…", "csv"), ("Export JSON…", "json"), ("Save PNG…", "png")):
            button = QPushButton(text)
            button.clicked.connect(lambda _=False, k=kind: self.export_requested.emit(k))
            export_row.addWidget(button)
        column.addLayout(export_row)
        holder = QWidget()
        holder.setLayout(column)
        return holder

    def clear(self) -> None:
        self.table.setRowCount(0)
        self.diff_view.clear()

    def show_rows(self, session, palette: theme.Palette) -> None:
        """`session`'s rows (gui.sessions.compare.ComparisonSession) in the table."""
        show_rows(self.table, session.rows(), palette)

    def select_first_difference(self, session) -> None:
        """Select the first row whose output differs from plain decoding's, if any."""
        rows = session.rows() if session else []
        differing = next((i for i, row in enumerate(rows) if row.identical_to_plain is False), None)
        if differing is not None:
            self.table.selectRow(differing)

    def selected_row(self, session) -> ComparisonRow | None:
        rows = session.rows() if session else []
        selected = self.table.selectionModel().selectedRows()
        index = selected[0].row() if selected else None
        return rows[index] if index is not None and index < len(rows) else None

    def show_diff(self, session, palette: theme.Palette) -> None:
        """The selected setting's output against its plain decoding (or the first that differs, or every
        setting's verdict in one line)."""
        rows = session.rows()
        if not rows:
            self.diff_view.clear()
            return
        row = self.selected_row(session)
        if row is None or not row.spec.speculative:
            row = next((r for r in rows if r.identical_to_plain is False), None)
        plain = next((r for r in rows if r.is_baseline and row is not None and r.baseline == row.baseline), rows[0])
        render_diff(self.diff_view, palette, session, plain, row, rows)

    def diff_text(self) -> str:
        return self.diff_view.toPlainText()

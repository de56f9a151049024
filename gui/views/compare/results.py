"""The compare window's results, drawn from what gui.sessions.compare holds: the summary table, the diff of a
setting's output against plain decoding (with the divergence diagnosis), and the sweep's table and verdict.

Pure rendering into the widgets it is given; computes no figure (they are engine.measure.compare's).
May touch: QtWidgets / QtGui, gui.theme, the compare parts' cell texts.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor
from PySide6.QtWidgets import QTableWidget, QTableWidgetItem, QTextEdit

from engine.core.events import TokenStatus
from engine.core.methods import method_spec
from engine.measure.baselines import baseline_backend
from engine.measure.compare import BASELINE_MISSING, ComparisonRow, SweepSummary
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


def show_sweep_table(table: QTableWidget, summary: SweepSummary | None) -> None:
    """One row per k (the best one starred and bold): speed-up, theory, acceptance, cost ratio."""
    points = list(summary.points) if summary else []
    table.setRowCount(len(points))
    for r, (point, theory) in enumerate(zip(points, summary.theory if summary else ())):
        best = summary.best is not None and point.k == summary.best.k
        for c, text in enumerate((("★ " if best else "") + str(point.k), f"{point.speedup:.2f}×",
                                  f"{theory:.2f}×", f"{point.acceptance_rate:.0%}", f"{point.cost_ratio:.3f}")):
            item = QTableWidgetItem(text)
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if best:
                font = item.font()
                font.setBold(True)
                item.setFont(font)
            table.setItem(r, c, item)


def sweep_verdict(summary: SweepSummary | None) -> tuple[str, str] | None:
    """The best-k sentence and the apply button's text; None when a summary with points has no best k
    (the texts stay as they were)."""
    best = summary.best if summary else None
    if best is not None:
        label = method_spec(summary.method).label
        verdict = "faster than plain decoding" if best.speedup > 1.0 else "no k beat plain decoding on this prompt"
        return (f"Best k for {label}: {best.k} — {best.speedup:.2f}× ({verdict}). "
                f"Pooled α = {summary.alpha:.0%}, c = {summary.cost_ratio:.3f}.", f"Use k = {best.k} in the chat")
    if summary is None or not summary.points:
        return "Run a sweep to find the fastest k for this prompt.", "Use this k in the chat"
    return None

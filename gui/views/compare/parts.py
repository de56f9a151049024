"""The compare window's pieces: one setting's fields (SettingRow) and one run's live pane (RunPane), with the words
the table and panes share.

They render what gui.sessions.compare holds and emit what the user asked; no state of their own.

May touch: gui.theme, engine.core.config and the method registry (read), engine.measure.compare's rows (read), the
chat's transcript view and stats pieces.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QSpinBox, QSplitter, QToolButton,
                               QVBoxLayout, QWidget)

from engine.measure.baselines import baseline_backend, plain_decoding_words
from engine.measure.compare import ComparisonRow
from engine.core.config import BACKENDS, MAX_K, REMOTE_PREFIX, SpecConfig, parse_spec
from engine.core.errors import ConfigError
from engine.core.methods import all_params, method_spec, speculative_methods
from gui import theme
from gui.views.chat.methods import add_method_items
from gui.views.chat.params import changed_signal, param_widget, read_param, write_param
from gui.views.chat.tree_control import show_tree_for, tree_of, tree_spin
from gui.views.live.stats import DASH, TimeSplitBar, seconds_text
from gui.views.live.timeline import RoundTimeline, share_scale
from gui.views.chat.transcript import TranscriptView

PANE_TIMELINE_HEIGHT = 72  # a pane's round timeline (the chat's live dock draws it taller)


def times_text(row: ComparisonRow) -> str:
    total = row.draft_seconds + row.verify_seconds
    share = f" ({row.draft_seconds / total:.0%} drafting)" if total > 0 else ""
    return f"{seconds_text(row.draft_seconds)} / {seconds_text(row.verify_seconds)}{share}"


def identical_text(row: ComparisonRow) -> str:
    """The "identical to plain" cell: identical, a near-tie at token N (margin, discrepancy, the two tokens),
    a MISMATCH, or a difference not diagnosed; sampled rows are not compared."""
    if row.spec.remote_url is not None:
        return "— (the server's tokens: not compared)"
    if row.identical_to_plain is None:
        return "— (sampling: not compared)" if row.equality == "sampled" else f"— ({row.equality})"
    if row.identical_to_plain:
        return "✓ identical"
    if row.divergence is not None:
        return row.divergence.short()
    return f"✗ differs at token {row.first_difference}"


def row_title(row: ComparisonRow, several: bool = False) -> str:
    """The table's first cell: plain decoding (on which backend, where `several` ran), the setting's label, or
    a server's, with where its figures came from (the server's own counts, or measured here)."""
    if row.spec.remote_url is not None:
        return f"{row.label} (figures: {row.figures_from})"
    if row.is_baseline:
        return plain_decoding_words(row.baseline) if several else "plain decoding"
    return row.label


# ------------------------------------------------------------------ one setting's fields

class SettingRow(QWidget):
    """Method, draft model, k, the tree's node budget (gui.views.chat.tree_control) and the method's own parameters
    (one control each) of one setting, or a server's
    model (backend "on a server": its URL, `http://HOST:PORT` or `remote:url=…`, run as the server was started,
    beside the local runs)."""

    changed = Signal()
    remove_requested = Signal(object)

    def __init__(self, spec: SpecConfig | None = None, removable: bool = True, max_k: int = MAX_K,
                 parent=None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.method = QComboBox()
        add_method_items(self.method, speculative_methods())
        self.draft = QComboBox()
        self.draft.setEditable(True)
        self.draft.addItem("default")
        self.draft.setToolTip("The draft model (draft-model only): it must share the target's tokenizer")
        self.draft.setMinimumWidth(90)
        self.k = QSpinBox()
        self.k.setRange(1, max_k)
        self.k.setValue(4)
        self.k.setPrefix("k = ")
        self.k.setToolTip("Tokens drafted per round")
        self.tree = tree_spin(compact=True)
        self.param_controls = {param.name: param_widget(param, compact=True) for param in all_params()}
        self.backend = QComboBox()
        self.backend.setObjectName("row_backend")
        self.backend.addItem("as loaded", None)
        for name in BACKENDS:
            self.backend.addItem(f"on {name}", name)
        self.backend.addItem("on a server", REMOTE_PREFIX)
        self.url = QLineEdit()
        self.url.setObjectName("row_url")
        self.url.setPlaceholderText("http://127.0.0.1:8080")
        self.url.setToolTip("An OpenAI-compatible server (llama-server, vLLM, SGLang): its model runs as the server "
                            "was started, and its row's counts are the server's own")
        self.backend.setToolTip("The backend this setting runs on: as the target was loaded, or the same model "
                                "loaded on the other backend too (the same method on both, side by side)")
        self.remove = QToolButton()
        self.remove.setText("✕")
        self.remove.setToolTip("Remove this setting")
        self.remove.setVisible(removable)
        self.remove.clicked.connect(lambda: self.remove_requested.emit(self))
        self.method.setMinimumWidth(200)
        layout.addWidget(self.method)
        layout.addWidget(self.draft, 1)
        layout.addWidget(self.k)
        layout.addWidget(self.tree)
        for widget in self.param_controls.values():
            layout.addWidget(widget)
        layout.addWidget(self.backend)
        layout.addWidget(self.url, 1)
        layout.addWidget(self.remove)
        layout.addStretch(0)
        for signal in (self.method.currentIndexChanged, self.k.valueChanged, self.tree.valueChanged,
                       *(changed_signal(w) for w in self.param_controls.values()), self.draft.currentTextChanged,
                       self.backend.currentIndexChanged, self.url.textChanged):
            signal.connect(self._changed)
        if spec is not None:
            self.set_spec(spec)
        self._refresh_enabled()

    def spec(self) -> SpecConfig:
        """ConfigError when the row is on a server whose URL is not a remote:url=http(s)://HOST:PORT."""
        if self.on_server:
            text = self.url.text().strip()
            return parse_spec(text if text.startswith(REMOTE_PREFIX) else f"{REMOTE_PREFIX}url={text}")
        method = method_spec(self.method.currentData())
        return SpecConfig(method=method.name, k=self.k.value(), tree=tree_of(self.tree, method),
                          draft=(self.draft.currentText().strip() or None) if method.needs_draft else None,
                          params={p.name: read_param(p, self.param_controls[p.name]) for p in method.params},
                          backend=self.backend.currentData())

    @property
    def on_server(self) -> bool:
        return self.backend.currentData() == REMOTE_PREFIX

    def set_spec(self, spec: SpecConfig) -> None:
        if spec.remote_url is not None:
            self.url.setText(spec.remote_url)
            self.backend.setCurrentIndex(self.backend.findData(REMOTE_PREFIX))
            self._refresh_enabled()
            return
        index = self.method.findData(spec.method)
        if index < 0:
            raise ConfigError(f"a compared setting needs a speculation method, got {spec.method!r}")
        self.method.setCurrentIndex(index)
        if spec.draft:
            if self.draft.findText(spec.draft) < 0:
                self.draft.insertItem(0, spec.draft)
            self.draft.setCurrentText(spec.draft)
        self.k.setValue(min(spec.k, self.k.maximum()))
        self.tree.setValue(spec.tree)
        for param in spec.info.params:
            write_param(param, self.param_controls[param.name], spec.param(param.name))
        self.backend.setCurrentIndex(max(0, self.backend.findData(spec.backend)))
        self._refresh_enabled()

    def _changed(self, *_args) -> None:
        self._refresh_enabled()
        self.changed.emit()

    def _refresh_enabled(self) -> None:
        method = method_spec(self.method.currentData())
        local = not self.on_server
        self.method.setEnabled(local)
        self.k.setVisible(local)
        self.tree.setVisible(local)
        show_tree_for(self.tree, method)
        self.draft.setVisible(local and method.needs_draft)
        for name, widget in self.param_controls.items():
            widget.setVisible(local and method.param(name) is not None)
        self.url.setVisible(not local)


# ------------------------------------------------------------------ one run's pane

class RunPane(QFrame):
    """One run's live coloured stream (the chat's transcript view), its figures and its round timeline (the chat's
    own, on one scale with the other panes', so plain decoding's one-token rounds compare with each setting's)."""

    def __init__(self, run, palette: theme.Palette, show_rejected: bool = True, parent=None) -> None:
        super().__init__(parent)
        self.run = run
        self.setObjectName("compare_pane")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(3)
        self.title = QLabel(run.label)
        self.title.setObjectName("pane_title")
        self.title.setToolTip(run.spec.label())
        self.state = QLabel("waiting")
        self.state.setObjectName("dim")
        self.transcript = TranscriptView(self._token, palette)
        self.transcript.set_show_rejected(show_rejected)
        self.transcript.setMinimumHeight(140)
        self.figures = QLabel(DASH)
        self.figures.setObjectName("dim")
        self.time_bar = TimeSplitBar(palette)
        self.time_bar.setToolTip("Draft time (orange) vs verify time (blue)")
        self.timeline = RoundTimeline(palette, canvas_height=PANE_TIMELINE_HEIGHT)
        layout.addWidget(self.title)
        layout.addWidget(self.state)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.figures)
        layout.addWidget(self.time_bar)
        layout.addWidget(self.timeline)
        self._shown_version = -1

    def _token(self, serial: int):
        tokens = self.run.session.tokens
        return tokens[serial] if 0 <= serial < len(tokens) else None

    def set_palette(self, palette: theme.Palette) -> None:
        self.transcript.set_palette(palette)
        self.time_bar.set_palette(palette)
        self.timeline.set_palette(palette)
        self.rerender()

    def set_show_rejected(self, show: bool) -> None:
        """Draw (or hide) the drafted tokens the target threw away; a change redraws the transcript."""
        if self.transcript.set_show_rejected(show):
            self.rerender()

    def rerender(self) -> None:
        session = self.run.session
        self.transcript.render_turns(session.turns, session.current)

    def refresh(self, row: ComparisonRow | None = None) -> None:
        """The figures line (from the timer while running, and once at the end with the table's row)."""
        live = self.run.session.live
        if row is None and live.version == self._shown_version:
            return
        self._shown_version = live.version
        stats = live.snapshot()
        parts = [f"{stats.committed_tokens} tok"]
        if stats.committed_tokens > 1:
            parts.append(f"{stats.tok_per_s:.1f} tok/s")
        if row is not None and row.speedup is not None and not row.is_baseline:
            parts.append(f"{row.speedup:.2f}× plain on {baseline_backend(row.baseline)}")
        if stats.drafted_tokens:
            parts.append(f"α {stats.acceptance_rate:.0%}")
        self.figures.setText(" · ".join(parts))
        self.figures.setToolTip(f"{stats.mean_accepted_length:.2f} tokens per target pass · drafting "
                                f"{seconds_text(stats.draft_seconds)}, verifying {seconds_text(stats.verify_seconds)}")
        self.time_bar.set_times(stats.draft_seconds, stats.verify_seconds)
        self.timeline.show_rounds(live.rounds)
        share_scale(pane.timeline for pane in self._lanes())

    def _lanes(self) -> list["RunPane"]:
        """This comparison's panes (the splitter's), this one included."""
        parent = self.parentWidget()
        siblings = [parent.widget(i) for i in range(parent.count())] if isinstance(parent, QSplitter) else []
        return [pane for pane in siblings if isinstance(pane, RunPane)] or [self]

    def set_state(self, text: str) -> None:
        self.state.setText(text)

"""The settings panel's Speculation box (gui.views.chat.controls.ControlsPanel): the method (with its notes), the
draft, k, the tree's node budget (gui.views.chat.tree_control), one control per method parameter, adaptive draft
length and the method's help. It keeps its widgets
and what it was told of the drafts on offer (the target's own names, another tokenizer's drafts, the one to
download), reads them back as a SpecConfig and tells what changed by signals. Which methods the loaded target
can use is the panel's to say (`mark_methods`, `offer_methods`).

May touch: its own widgets, the method registry (read), gui.views.chat.methods, .params, .tree_control and
.draft_list.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QGroupBox, QLabel, QSpinBox, QToolButton

from engine.core.config import MAX_K, SpecConfig
from engine.core.methods import MethodSpec, all_params, method_spec
from engine.models.pairs import DRAFT_IS_TARGET
from gui.views.chat.boxes import narrow_combo, note_label, set_combo_text
from gui.views.chat.draft_list import cross_draft_note, fill_drafts
from gui.views.chat.methods import add_method_items, draft_placeholder, draft_tooltip, is_head, mark_methods
from gui.views.chat.params import SPIN_CEILING, changed_signal, param_widget, read_param, shown_value, write_param
from gui.views.chat.tree_control import show_tree_for, tree_of, tree_spin


class SpecBox(QGroupBox):
    """How the next reply speculates: the method, its draft, k and the method's own parameters."""

    changed = Signal()  # the method, the draft, k, the tree, a parameter or adaptive
    method_picked = Signal(str)  # the user picked a method in the list (not set by the panel)
    download_requested = Signal(str)  # a known-good draft's hub id

    def __init__(self, parent=None) -> None:
        super().__init__("Speculation", parent)
        self._target_aliases: set[str] = set()  # names of the loaded target's files ("default", its path)
        self._suggested_download: str | None = None
        self._draft_note_text = ""  # why no draft is installed, when none is
        self._cross_drafts: set[str] = set()  # the drafts offered that are of another tokenizer
        self.form = form = QFormLayout(self)
        # a method's parameters bring long labels (suffix's "Draft per matched token"): in a narrow dock a row whose
        # label and field don't fit side by side puts the field under its label, instead of widening the dock
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.method = narrow_combo()
        add_method_items(self.method)
        form.addRow("Method", self.method)
        self.own_note = note_label("own_drafter_note")
        form.addRow(self.own_note)
        self.backend_note = note_label("backend_note")
        form.addRow(self.backend_note)
        self.draft = QComboBox()
        self.draft.setObjectName("draft_choice")
        self.draft.setEditable(True)
        form.addRow("Draft model", self.draft)
        self.draft_note = note_label("draft_note")
        form.addRow(self.draft_note)
        self.draft_download = QToolButton()
        self.draft_download.setObjectName("draft_download")
        self.draft_download.hide()
        form.addRow(self.draft_download)  # a row of its own: a hub id is long, the dock narrow
        self.k = QSpinBox()
        self.k.setRange(1, SPIN_CEILING)  # the range is engine.core.config's check_k: out of it, refused with it
        self.k.setValue(4)
        self.k.setToolTip(f"How many tokens the drafter proposes per round (1 to {MAX_K})")
        form.addRow("k (draft length)", self.k)
        self.tree = tree_spin()
        form.addRow("Tree (nodes)", self.tree)
        self.param_controls = {}  # one per method parameter (ParamSpec), by name
        for param in all_params():
            self.param_controls[param.name] = param_widget(param)
            form.addRow(param.title[:1].upper() + param.title[1:], self.param_controls[param.name])
        self.adaptive = QCheckBox("Adaptive draft length")
        self.adaptive.setToolTip("Draft only as many tokens (≤ k) as pay for their verification, learnt as it runs")
        form.addRow("", self.adaptive)
        self.method_help = QLabel()
        self.method_help.setObjectName("dim")
        self.method_help.setWordWrap(True)
        form.addRow(self.method_help)
        self._connect()

    def _connect(self) -> None:
        for signal in (self.method.currentIndexChanged, self.k.valueChanged, self.tree.valueChanged,
                       self.adaptive.toggled,
                       *(changed_signal(w) for w in self.param_controls.values()), self.draft.currentTextChanged):
            signal.connect(self.changed)
        self.method.activated.connect(lambda _index: self.method_picked.emit(self.method_name()))
        self.draft_download.clicked.connect(lambda: self.download_requested.emit(self._suggested_download or ""))

    # ------------------------------------------------------------------ reading
    def method_name(self) -> str:
        return self.method.currentData()

    def spec(self, backend: str | None) -> SpecConfig:
        """The chosen setting (`backend`: where it runs when not as loaded); raises ConfigError when refused."""
        method = method_spec(self.method_name())
        params = {p.name: read_param(p, self.param_controls[p.name]) for p in method.params}
        return SpecConfig(method=method.name, k=self.k.value(), draft=self.draft_name(), params=params,
                          tree=tree_of(self.tree, method), adaptive=self.adaptive.isChecked() and method.speculative,
                          backend=backend)

    def draft_name(self) -> str | None:
        """The draft model, when the method uses one; for a method that reads a head, the head typed there when
        it is one: a folder (eagle), or an existing file its MethodSpec's head_file pattern names (mtp:
        mtp-*.gguf); else None: the engine looks for the model's own head (a draft model named there is not one)."""
        method, text = method_spec(self.method_name()), self.draft.currentText().strip()
        if method.reads_head:
            return text if text and is_head(Path(text).expanduser(), method.head_file) else None
        return (text or None) if method.needs_draft else None

    def usable_draft(self) -> str | None:
        """The draft model typed or chosen, unless it is empty or the target itself."""
        name = self.draft.currentText().strip()
        return name if name and name not in self._target_aliases else None

    def values(self) -> dict:
        """The method, draft, k, each parameter as its control shows it (0: auto), the tree's node budget and adaptive,
        by name."""
        return {"method": self.method_name(), "draft": self.draft.currentText().strip(), "k": self.k.value(),
                **{name: shown_value(w) for name, w in self.param_controls.items()}, "tree": self.tree.value(),
                "adaptive": self.adaptive.isChecked()}

    # ------------------------------------------------------------------ writing
    def set_values(self, *, method: str | None = None, draft: str | None = None, k: int | None = None,
                   adaptive: bool | None = None, params: dict | None = None, tree: int | None = None) -> None:
        """Show the fields given (None leaves a field as it is; `params` by name, 0: auto)."""
        if method is not None:
            self.method.setCurrentIndex(self.method.findData(method_spec(method).name))
        if draft is not None:
            set_combo_text(self.draft, draft)
        if k is not None:
            self.k.setValue(k)
        if tree is not None:
            self.tree.setValue(tree)
        for name, value in (params or {}).items():
            if value is not None:
                write_param(next(p for p in all_params() if p.name == name), self.param_controls[name], value)
        if adaptive is not None:
            self.adaptive.setChecked(adaptive)

    def show_params(self, spec: SpecConfig) -> None:
        """Show each parameter of `spec`'s method as `spec` has it (its default where `spec` leaves it unset)."""
        for param in spec.info.params:
            write_param(param, self.param_controls[param.name], spec.param(param.name))

    def mark_methods(self, choices: dict) -> None:
        """Disable each method the loaded target can't use (engine.models.availability.MethodChoice by name)."""
        mark_methods(self.method, choices)

    def offer_methods(self, methods: list[MethodSpec], choices: dict, pick: str) -> None:
        """List `methods` in their order, marked by `choices`, with `pick` selected (without telling)."""
        self.method.blockSignals(True)
        self.method.clear()
        add_method_items(self.method, methods)
        mark_methods(self.method, choices)
        self.method.setCurrentIndex(max(0, self.method.findData(pick)))
        self.method.blockSignals(False)

    def show_own_note(self, text: str) -> None:
        """Under the method: how the loaded model drafts for itself ("" hides it)."""
        self.own_note.setText(text)
        self.own_note.setVisible(bool(text))

    def show_backend_note(self, note: str) -> bool:
        """Under the method: why it runs on another backend ("" hides it); returns whether the note changed."""
        changed = note != self.backend_note.text()
        self.backend_note.setText(note)
        self.backend_note.setVisible(bool(note))
        return changed

    def apply_own_settings(self, values: dict) -> None:
        """What a method sets for a model that drafts for itself: k at most `max_k`, its own `draft` (when
        none is typed)."""
        if values.get("max_k"):
            self.k.setValue(min(self.k.value(), values["max_k"]))
        if values.get("draft") and not self.draft.currentText().strip():
            set_combo_text(self.draft, values["draft"])

    def set_draft_choices(self, names: list[str], *, target_aliases: set[str], note: str = "",
                          download: str | None = None, cross_tokenizer: set[str] = frozenset()) -> None:
        """The drafts to offer (the target's tokenizer first, then another's, named in `cross_tokenizer` and
        marked), the target's own names, and when none is installed, why (`note`) and what to `download`."""
        self._target_aliases = {a for a in target_aliases if a}
        self._cross_drafts = set(cross_tokenizer)
        current = self.draft.currentText().strip()
        self.draft.blockSignals(True)
        fill_drafts(self.draft, names, self._cross_drafts)
        self.draft.setEditText(current if current else (names[0] if names else ""))
        self.draft.blockSignals(False)
        self._suggested_download = download
        self.draft_download.setText(f"Download {download.rsplit('/', 1)[-1]}" if download else "")  # tip: full id
        self.draft_download.setToolTip(f"Download {download} from the Hugging Face Hub in the Models window"
                                       if download else "")
        self._draft_note_text = note

    def show_method(self, method: MethodSpec) -> None:
        """Enable what `method` uses, show only its own parameters, its help and the draft's note."""
        self.draft.setEnabled(method.needs_draft or method.reads_head)
        self.draft.lineEdit().setPlaceholderText(draft_placeholder(method))
        self.draft.setToolTip(draft_tooltip(method))
        self.k.setEnabled(method.speculative)
        self.adaptive.setEnabled(method.speculative)
        show_tree_for(self.tree, method)
        for name, widget in self.param_controls.items():  # only the method's own parameters show
            own = method.param(name) is not None
            widget.setEnabled(own)
            self.form.setRowVisible(widget, own)
        self.method_help.setText(method.description)
        self._show_draft_note(method)

    def _show_draft_note(self, method: MethodSpec) -> None:
        """Under the draft list: the draft is the target itself (what the Models window says), or, for the
        method that drafts with a smaller model, the draft offered is of another tokenizer (drafted through text),
        or no draft is given yet and none is installed (with the known-good one to download). Another method's
        draft (an assistant, a head) gets no draft model's hint."""
        name = self.draft.currentText().strip()
        is_target = method.needs_draft and bool(name) and name in self._target_aliases
        model_drafts = method.implied_by_draft
        empty = not name  # a draft given (a path, a hub id) is checked when it loads: no "none installed" then
        note = DRAFT_IS_TARGET if is_target else (self._draft_note_text if model_drafts and empty else "")
        cross = cross_draft_note(name) if model_drafts and name in self._cross_drafts else ""
        self.draft_note.setText(f"⚠ {note}" if note else cross)
        self.draft_note.setVisible(bool(note or cross))
        self.draft_download.setVisible(model_drafts and empty and bool(self._suggested_download))

"""Settings: the Hugging Face token (kept in the OS keyring only, through engine.models.secrets) and where things live.

The token field never shows a saved token: it says whether one is set (hf_…abcd) and where it is kept. With
no keyring backend the token is kept for this session only, and the dialog says so.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit,
                               QPushButton, QVBoxLayout)

from engine.models import secrets
from engine.models.secrets import SecretStoreError, TokenStorage, TokenStore


class SettingsDialog(QDialog):
    token_saved = Signal(object)  # TokenStorage
    token_removed = Signal()

    def __init__(self, store: TokenStore | None = None, *, history_path: str = "", settings_path: str = "",
                 parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.store = store or secrets.default_store()
        self._has_token = False
        outer = QVBoxLayout(self)

        token_box = QGroupBox("Hugging Face")
        form = QFormLayout(token_box)
        self.token = QLineEdit()
        self.token.setObjectName("hf_token")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("hf_… (for gated and private models)")
        self.token.returnPressed.connect(self.save_token)
        self.token.textChanged.connect(lambda _text: self._update_buttons())
        form.addRow("Access token", self.token)
        row = QHBoxLayout()
        self.save_button = QPushButton("Save token")
        self.save_button.clicked.connect(self.save_token)
        self.remove_button = QPushButton("Remove token")
        self.remove_button.clicked.connect(self.remove_token)
        row.addWidget(self.save_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        form.addRow("", row)
        self.token_state = QLabel()
        self.token_state.setObjectName("dim")
        self.token_state.setWordWrap(True)
        form.addRow("", self.token_state)
        self.token_problem = QLabel()
        self.token_problem.setObjectName("problem")
        self.token_problem.setWordWrap(True)
        self.token_problem.hide()
        form.addRow("", self.token_problem)
        self.token_help = QLabel()
        self.token_help.setObjectName("dim")
        self.token_help.setWordWrap(True)
        form.addRow(self.token_help)
        outer.addWidget(token_box)

        places = QGroupBox("Where SpecScope keeps things")
        places_form = QFormLayout(places)
        for label, value in (("Chat history", history_path or "off"), ("Settings", settings_path or "—")):
            text = QLabel(value)
            text.setObjectName("dim")
            text.setWordWrap(True)
            text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            places_form.addRow(label, text)
        outer.addWidget(places)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        outer.addWidget(buttons)
        self.resize(560, self.sizeHint().height())
        self.refresh()

    def refresh(self) -> None:
        token = self.store.get()
        storage = self.store.storage
        if storage is TokenStorage.KEYRING:
            where = f"the system keyring ({self.store.backend_name()})"
        else:
            where = "memory for this session only: no system keyring is available, so it is forgotten when " \
                    "SpecScope quits"
        # one story: where the token is kept, said the same way in both lines
        kept = ("in your system's keyring only" if storage is TokenStorage.KEYRING
                else "in memory for this session only (there is no system keyring)")
        self.token_help.setText("Create a read token at huggingface.co/settings/tokens. It is kept "
                                f"{kept}: never in a settings file, the chat history or a log.")
        if token:
            self.token_state.setText(f"A token is set ({secrets.mask(token)}), kept in {where}.")
        else:
            self.token_state.setText(f"No token set. A token you save is kept in {where}.")
        self._has_token = bool(token)
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.save_button.setEnabled(bool(self.token.text().strip()))
        self.remove_button.setEnabled(self._has_token)

    def _problem(self, text: str | None) -> None:
        self.token_problem.setText(f"⚠ {text}" if text else "")
        self.token_problem.setVisible(bool(text))

    def save_token(self) -> TokenStorage | None:
        try:
            storage = self.store.set(self.token.text())
        except (ValueError, SecretStoreError) as exc:
            self._problem(str(exc))
            return None
        self.token.clear()
        self._problem(None)
        self.refresh()
        self.token_saved.emit(storage)
        return storage

    def remove_token(self) -> None:
        try:
            self.store.delete()
        except SecretStoreError as exc:
            self._problem(str(exc))
            return
        self._problem(None)
        self.refresh()
        self.token_removed.emit()

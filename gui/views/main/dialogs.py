"""The small modal questions every window asks (yes/no, a line of text, where to save), in one place.

A window is given the one it asks (the main window's `confirm`), so tests answer without a modal dialog.
Touches QtWidgets only.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog, QInputDialog, QLineEdit, QMessageBox


def ask_yes_no(parent, title: str, text: str) -> bool:
    answer = QMessageBox.question(parent, title, text, QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                  QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


def ask_text(parent, title: str, label: str, text: str) -> str | None:
    value, ok = QInputDialog.getText(parent, title, label, QLineEdit.EchoMode.Normal, text)
    return value if ok else None


def ask_save_path(parent, title: str, suggested: str, filters: str) -> str | None:
    path, _ = QFileDialog.getSaveFileName(parent, title, suggested, filters)
    return path or None

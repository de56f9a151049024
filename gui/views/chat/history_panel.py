"""The history sidebar: saved conversations (newest first), search by text, open, rename, delete, export.

It reads and writes through `gui.persistence.store.HistoryStore`; the window opens a conversation it is told about.
Questions to the user (a new title, "delete?", where to save) are three callables given to it (by default the
modal dialogs of gui.views.main.dialogs; a test gives its answers).

May touch: gui.persistence.store (the history database) and exports, gui.views.main.dialogs. No chat state: the
window says which chat is current.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QRect, QSize, Qt, Signal
from PySide6.QtGui import QAction, QColor, QFont, QFontMetrics
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem,
                               QMenu, QStyle, QStyledItemDelegate, QToolButton, QVBoxLayout, QWidget)

from gui import theme
from gui.persistence.exports import conversation_json, conversation_markdown, write_private
from gui.persistence.settings import export_folder
from gui.persistence.store import HistoryError, HistoryStore
from gui.views.main.dialogs import ask_save_path, ask_text, ask_yes_no

ID_ROLE = Qt.ItemDataRole.UserRole
SUBTITLE_ROLE = Qt.ItemDataRole.UserRole + 1


def when(timestamp: float) -> str:
    moment = dt.datetime.fromtimestamp(timestamp)
    today = dt.date.today()
    if moment.date() == today:
        return moment.strftime("%H:%M")
    if moment.year == today.year:
        return f"{moment.day} {moment.strftime('%b')}"
    return f"{moment.day} {moment.strftime('%b %Y')}"


class _TwoLineDelegate(QStyledItemDelegate):
    """Title on the first line, a dim subtitle (date · messages, or the search snippet) below."""

    def __init__(self, palette: theme.Palette, parent=None) -> None:
        super().__init__(parent)
        self.palette_ = palette

    def sizeHint(self, option, index) -> QSize:  # noqa: N802
        height = QFontMetrics(option.font).height()
        return QSize(120, 2 * height + 14)

    def paint(self, painter, option, index) -> None:
        p = self.palette_
        painter.save()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        rect = option.rect.adjusted(2, 1, -2, -1)
        if selected:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(p.accent))
            painter.drawRoundedRect(rect, 6, 6)
        elif option.state & QStyle.StateFlag.State_MouseOver:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(p.surface_alt))
            painter.drawRoundedRect(rect, 6, 6)
        metrics = QFontMetrics(option.font)
        text_rect = rect.adjusted(8, 5, -8, -5)
        title_font = QFont(option.font)
        title_font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(title_font)
        painter.setPen(QColor(p.accent_text if selected else p.text))
        title = QFontMetrics(title_font).elidedText(index.data(Qt.ItemDataRole.DisplayRole) or "",
                                                   Qt.TextElideMode.ElideRight, text_rect.width())
        painter.drawText(QRect(text_rect.left(), text_rect.top(), text_rect.width(), metrics.height()),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, title)
        painter.setFont(option.font)
        painter.setPen(QColor(p.accent_text if selected else p.text_dim))
        subtitle = metrics.elidedText(index.data(SUBTITLE_ROLE) or "", Qt.TextElideMode.ElideRight,
                                      text_rect.width())
        painter.drawText(QRect(text_rect.left(), text_rect.top() + metrics.height() + 2, text_rect.width(),
                               metrics.height()), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         subtitle)
        painter.restore()


class HistoryPanel(QWidget):
    conversation_opened = Signal(int)
    conversation_deleted = Signal(int)
    conversation_renamed = Signal(int, str)

    def __init__(self, store: HistoryStore | None, palette: theme.Palette, parent=None, *,
                 ask_text: Callable[..., str | None] = ask_text, ask_yes_no: Callable[..., bool] = ask_yes_no,
                 ask_save_path: Callable[..., str | None] = ask_save_path) -> None:
        """`ask_text(parent, title, label, text)` asks for a new title, `ask_yes_no(parent, title, text)` whether to
        delete, `ask_save_path(parent, title, path, filters)` where to export (None: cancelled)."""
        super().__init__(parent)
        self.store = store
        self.current_id: int | None = None
        self._ask_text = ask_text
        self._ask_yes_no = ask_yes_no
        self._ask_save_path = ask_save_path

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 0, 8, 8)
        layout.setSpacing(6)
        self.search = QLineEdit()
        self.search.setObjectName("history_search")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(lambda _text: self.refresh())
        layout.addWidget(self.search)
        self.list = QListWidget()
        self.list.setObjectName("history_list")
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setMouseTracking(True)
        self._delegate = _TwoLineDelegate(palette, self.list)
        self.list.setItemDelegate(self._delegate)
        self.list.itemActivated.connect(self._item_opened)
        self.list.itemClicked.connect(self._item_opened)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        # tall enough to browse: at least five chats in view (the delegate draws two lines each)
        self.list.setMinimumHeight(5 * (2 * self.list.fontMetrics().height() + 14) + 4)
        layout.addWidget(self.list, 1)
        self.empty = QLabel()
        self.empty.setObjectName("dim")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.empty)

        layout.addLayout(self._buttons())
        self.notice = QLabel()
        self.notice.setObjectName("notice")
        self.notice.setWordWrap(True)
        self.notice.hide()
        layout.addWidget(self.notice)
        rename_action = QAction(self, shortcut=Qt.Key.Key_F2, triggered=lambda: self.rename())
        rename_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.addAction(rename_action)
        self.list.currentItemChanged.connect(lambda *_: self._update_buttons())
        if store is not None and store.read_only:
            self.show_notice(store.read_only_reason)
        self.refresh()

    def _buttons(self) -> QHBoxLayout:
        """Rename, Delete and Export (a menu: Markdown or JSON) of the selected chat."""
        buttons = QHBoxLayout()
        buttons.setSpacing(4)
        self.rename_button = self._tool_button("Rename", "Rename the selected chat (F2)", lambda: self.rename())
        self.delete_button = self._tool_button("Delete", "Delete the selected chat", lambda: self.delete())
        self.export_button = self._tool_button("Export ▾", "Save the selected chat as Markdown or JSON", None)
        self.export_button.setStyleSheet("QToolButton::menu-indicator { image: none; width: 0px; }")
        menu = QMenu(self.export_button)
        menu.addAction(QAction("As Markdown…", menu, triggered=lambda: self.export(fmt="markdown")))
        menu.addAction(QAction("As JSON (with every token)…", menu, triggered=lambda: self.export(fmt="json")))
        self.export_button.setMenu(menu)
        self.export_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        for button in (self.rename_button, self.delete_button, self.export_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        return buttons

    def _tool_button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        if slot is not None:
            button.clicked.connect(slot)
        return button

    # ------------------------------------------------------------------ state
    def set_palette(self, palette: theme.Palette) -> None:
        self._delegate.palette_ = palette
        self.list.viewport().update()

    def show_notice(self, text: str | None) -> None:
        self.notice.setText(text or "")
        self.notice.setVisible(bool(text))

    def set_current(self, conversation_id: int | None) -> None:
        self.current_id = conversation_id
        self._select(conversation_id)

    def conversation_ids(self) -> list[int]:
        return [self.list.item(i).data(ID_ROLE) for i in range(self.list.count())]

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def selected_id(self) -> int | None:
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item is not None else None

    def refresh(self) -> None:
        """Re-read the list (or the search hits) from the store."""
        self.list.clear()
        if self.store is None:
            self.empty.setText("Chat history is off.")
            self.empty.show()
            self._update_buttons()
            return
        needle = self.search.text().strip()
        try:
            if needle:
                seen: dict[int, QListWidgetItem] = {}
                for hit in self.store.search(needle):
                    if hit.conversation_id in seen:
                        continue
                    seen[hit.conversation_id] = self._add_item(
                        hit.conversation_id, hit.title,
                        "title matches" if hit.message_id is None else f"{_role(hit.role)}: {hit.snippet}")
            else:
                for summary in self.store.list_conversations():
                    count = summary.n_messages
                    self._add_item(summary.id, summary.title,
                                   f"{when(summary.updated_at)} · {count} message{'s' if count != 1 else ''}")
        except HistoryError as exc:
            self.show_notice(str(exc))
        if self.list.count() == 0:
            self.empty.setText(f"No chat mentions “{needle}”." if needle else
                               "Your chats appear here as you write them.")
        self.empty.setVisible(self.list.count() == 0)
        self._select(self.current_id)
        self._update_buttons()

    def _add_item(self, conversation_id: int, title: str, subtitle: str) -> QListWidgetItem:
        item = QListWidgetItem(title)
        item.setData(ID_ROLE, conversation_id)
        item.setData(SUBTITLE_ROLE, subtitle)
        item.setToolTip(f"{title}\n{subtitle}")
        self.list.addItem(item)
        return item

    def _select(self, conversation_id: int | None) -> None:
        self.list.blockSignals(True)
        try:
            self.list.setCurrentRow(-1)
            for i in range(self.list.count()):
                if self.list.item(i).data(ID_ROLE) == conversation_id:
                    self.list.setCurrentRow(i)
                    break
        finally:
            self.list.blockSignals(False)
        self._update_buttons()

    def _update_buttons(self) -> None:
        writable = self.store is not None and not self.store.read_only
        selected = self.selected_id() is not None
        self.rename_button.setEnabled(writable and selected)
        self.delete_button.setEnabled(writable and selected)
        self.export_button.setEnabled(selected)

    # ------------------------------------------------------------------ actions
    def _item_opened(self, item: QListWidgetItem) -> None:
        conversation_id = item.data(ID_ROLE)
        if conversation_id != self.current_id:
            self.conversation_opened.emit(conversation_id)

    def rename(self, conversation_id: int | None = None, title: str | None = None) -> bool:
        conversation_id = conversation_id if conversation_id is not None else self.selected_id()
        if conversation_id is None or self.store is None:
            return False
        if title is None:
            current = next((self.list.item(i).text() for i in range(self.list.count())
                            if self.list.item(i).data(ID_ROLE) == conversation_id), "")
            title = self._ask_text(self, "Rename chat", "Title:", current)
            if title is None or not title.strip():
                return False
        try:
            self.store.rename_conversation(conversation_id, title)
        except HistoryError as exc:
            self.show_notice(str(exc))
            return False
        self.refresh()
        self.conversation_renamed.emit(conversation_id, title)
        return True

    def delete(self, conversation_id: int | None = None) -> bool:
        conversation_id = conversation_id if conversation_id is not None else self.selected_id()
        if conversation_id is None or self.store is None:
            return False
        title = next((self.list.item(i).text() for i in range(self.list.count())
                      if self.list.item(i).data(ID_ROLE) == conversation_id), "this chat")
        if not self._ask_yes_no(self, "Delete chat", f"Delete “{title}” and all its messages? This cannot be "
                                                    "undone."):
            return False
        try:
            self.store.delete_conversation(conversation_id)
        except HistoryError as exc:
            self.show_notice(str(exc))
            return False
        if self.current_id == conversation_id:
            self.current_id = None
        self.refresh()
        self.conversation_deleted.emit(conversation_id)
        return True

    def export(self, conversation_id: int | None = None, fmt: str = "markdown", path: str | None = None) -> Path | None:
        conversation_id = conversation_id if conversation_id is not None else self.selected_id()
        if conversation_id is None or self.store is None:
            return None
        suffix, filters = (".md", "Markdown (*.md)") if fmt == "markdown" else (".json", "JSON (*.json)")
        if path is None:
            title = next((self.list.item(i).text() for i in range(self.list.count())
                          if self.list.item(i).data(ID_ROLE) == conversation_id), "chat")
            safe = "".join(c if c.isalnum() or c in " -_" else "_" for c in title).strip() or "chat"
            path = self._ask_save_path(self, "Export chat", str(export_folder() / f"{safe[:60]}{suffix}"), filters)
            if path is None:
                return None
        try:
            conversation = self.store.load_conversation(conversation_id)
            text = conversation_markdown(conversation) if fmt == "markdown" else conversation_json(conversation)
            target = Path(path)
            write_private(target, text)  # owner-only, whole or not at all
        except (HistoryError, OSError) as exc:
            self.show_notice(f"Not exported: {exc}")
            return None
        self.show_notice(None)
        return target

    def _context_menu(self, point) -> None:
        item = self.list.itemAt(point)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Open", lambda: self._item_opened(item))
        menu.addAction("Rename…", lambda: self.rename())
        menu.addAction("Export as Markdown…", lambda: self.export(fmt="markdown"))
        menu.addAction("Export as JSON…", lambda: self.export(fmt="json"))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete())
        menu.exec(self.list.viewport().mapToGlobal(point))


def _role(role: str | None) -> str:
    return {"user": "you", "assistant": "assistant", "system": "system"}.get(role or "", role or "")

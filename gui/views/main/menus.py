"""The main window's menus (Chat, View, Tools, Help) and the Help pages they open.

Each action calls the window's public methods or its helpers (replies, conversations, tools); the View menu's
actions that hold a state are returned to the window (`ViewActions`), which keeps them.
May touch: QtGui actions, gui.theme, gui.views.dialogs.help.
"""

from __future__ import annotations

from typing import NamedTuple

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMenu, QMessageBox

from gui import theme

ABOUT = ("<b>SpecScope</b><br>Speculative decoding, running locally, that you can watch.<br><br>"
         "Each round a drafter proposes k tokens and the target model checks them in one pass: accepted tokens "
         "are kept, the first disagreement is replaced by the target's own token, and a fully accepted draft "
         "earns a bonus token.")


class ViewActions(NamedTuple):
    """The View menu's actions that hold a state: the window keeps them (the settings restore and save them)."""

    rejected: QAction  # show the rejected drafts
    record: QAction  # record each round's tree
    themes: QActionGroup  # the active theme is checked


def build_menus(window) -> ViewActions:
    """The menus on the window's menu bar; each action calls the window's public methods or its helpers."""
    _build_chat_menu(window)
    view_actions = _build_view_menu(window)
    _build_tools_menu(window)
    _build_help_menu(window)
    return view_actions


def _build_chat_menu(window) -> None:
    chat = window.menuBar().addMenu("&Chat")
    chat.addActions([QAction("&New chat", window, shortcut=QKeySequence.StandardKey.New, triggered=window.new_chat),
                     QAction("&Stop", window, triggered=window.stop)])
    chat.addSeparator()
    _build_reply_actions(window, chat)
    chat.addSeparator()
    chat.addAction(QAction("Export chat as &Markdown…", window,
                           triggered=lambda: window.conversations.export("markdown")))
    chat.addAction(QAction("Export chat as &JSON…", window, triggered=lambda: window.conversations.export("json")))
    chat.addSeparator()
    chat.addAction(QAction("&Quit", window, shortcut=QKeySequence.StandardKey.Quit, triggered=window.close))


def _build_reply_actions(window, menu) -> None:
    from gui.views.chat.transcript import ACTION_TIPS

    replies = window.replies
    actions = (("&Copy last reply", "Ctrl+Shift+C", ACTION_TIPS["copy"], lambda: replies.copy_reply()),
               ("&Regenerate last reply", "Ctrl+R", ACTION_TIPS["regenerate"], lambda: replies.regenerate()),
               ("Regenerate with the c&urrent settings", "Ctrl+Shift+R",
                "Write the last reply again with the settings panel's settings, in a new branch of the chat",
                lambda: replies.regenerate(current=True)),
               ("&Edit last message", "Ctrl+E", ACTION_TIPS["edit"], lambda: replies.edit_message()))
    for label, keys, tip, slot in actions:
        action = QAction(label, window, shortcut=QKeySequence(keys), triggered=slot)
        action.setToolTip(tip if keys in tip else f"{tip} ({keys})")
        menu.addAction(action)
    menu.setToolTipsVisible(True)


def _build_view_menu(window) -> ViewActions:
    view = window.menuBar().addMenu("&View")
    view.setToolTipsVisible(True)
    rejected = QAction("Show &rejected drafts", window, checkable=True, checked=True)
    rejected.toggled.connect(window.legend.show_rejected.setChecked)
    view.addAction(rejected)
    record = QAction("Record each round's &tree", window, checkable=True, checked=window.session.record_rounds)
    record.setToolTip("From the next reply, keep the target's top-5 alternatives, entropy and draws at every position "
                      "it decides (the round tree, colour by entropy); off, nothing is recorded. Measured cost on the "
                      "built-in model: under 1 % of tok/s.")
    record.toggled.connect(window.set_record_rounds)
    view.addAction(record)
    view.addSeparator()
    for dock in (window.history_dock, window.controls_dock, window.live_dock):
        view.addAction(dock.toggleViewAction())
    view.addSeparator()
    themes = QActionGroup(window)
    for name in ("light", "dark"):
        action = QAction(f"{name.title()} theme", window, checkable=True,
                         checked=theme.THEMES[name] == window.palette_,
                         triggered=lambda _=False, n=name: window.set_theme(n))
        action.setData(name)
        themes.addAction(action)
        view.addAction(action)
    return ViewActions(rejected, record, themes)


def _build_tools_menu(window) -> None:
    tools = window.menuBar().addMenu("&Tools")
    tools.addAction(QAction("&Models…", window, shortcut=QKeySequence("Ctrl+M"), triggered=window.open_models))
    settings = QKeySequence.keyBindings(QKeySequence.StandardKey.Preferences) or [QKeySequence("Ctrl+,")]
    tools.addAction(QAction("&Settings…", window, shortcut=settings[0], triggered=window.open_settings))
    tools.addAction(QAction("&Compare settings and k…", window, shortcut=QKeySequence("Ctrl+Shift+K"),
                            triggered=window.open_compare))
    tools.addAction(QAction("Which setting is &fastest here?…", window, shortcut=QKeySequence("Ctrl+Shift+F"),
                            triggered=window.open_fastest))


def _build_help_menu(window) -> None:
    help_ = window.menuBar().addMenu("&Help")
    help_.addAction(QAction("&What am I looking at?", window,
                            shortcut=QKeySequence(QKeySequence.StandardKey.HelpContents),
                            triggered=lambda: window.open_help("guide")))
    help_.addAction(QAction("&Keyboard shortcuts", window, shortcut=QKeySequence("Ctrl+/"),
                            triggered=lambda: window.open_help("shortcuts")))
    help_.addSeparator()
    help_.addAction(QAction("&About SpecScope", window,
                            triggered=lambda: QMessageBox.about(window, "About SpecScope", ABOUT)))


def help_page(window, page: str):
    """A Help page: "guide" (the colours and figures) or "shortcuts" (read from the menus' actions)."""
    from gui.views.dialogs.help import HelpPage, guide_html, shortcuts_html

    if page == "guide":
        dialog = HelpPage("What am I looking at?", guide_html(window.palette_), window)
    else:
        actions = [a for menu in window.menuBar().findChildren(QMenu) for a in menu.actions()]
        dialog = HelpPage("Keyboard shortcuts", shortcuts_html(list(dict.fromkeys(actions))), window)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, True)
    return dialog

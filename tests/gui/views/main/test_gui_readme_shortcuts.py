"""README's shortcuts are the windows' own: its "Keyboard shortcuts" table lists every menu action that has keys
(the main window's and the compare window's), with those keys, and nothing else as a menu's; its other rows name
keys something is bound to (a widget's action, a QShortcut, the message box's keys); and a "(Menu ▸ Item…, keys)"
in its prose is the menu's. Read from the built windows, never from a list written here."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence, QShortcut

from gui.views.dialogs.help import WIDGET_KEYS
from tests.e2e.readme_kit import readme_text, section

ROOT = Path(__file__).resolve().parents[4]
COMPARE = "the compare window's "
# the gui files that bind keys; each builds a window this test opens (a new one: open its window here too)
BINDERS = {"gui/views/main/menus.py", "gui/views/main/window.py", "gui/views/compare/window.py",
           "gui/views/chat/history_panel.py"}


def keys_of(action_or_sequence) -> str:
    sequence = action_or_sequence if isinstance(action_or_sequence, QKeySequence) else action_or_sequence.shortcut()
    return sequence.toString(QKeySequence.SequenceFormat.PortableText)


def menu_actions(window, where: str = "") -> dict[tuple[str, str], QAction]:
    """(where + menu title, action text) → the action, for every action in the window's menus."""
    found = {}
    for entry in window.menuBar().actions():
        menu = entry.menu()
        for action in menu.actions() if menu else ():
            if action.text():
                found[(where + menu.title().replace("&", ""), action.text().replace("&", ""))] = action
    return found


def menu_shortcuts(actions: dict[tuple[str, str], QAction]) -> set[tuple[str, str, str]]:
    """(keys, menu, action text) for every menu action with keys."""
    return {(keys_of(action), menu, text) for (menu, text), action in actions.items() if not action.shortcut().isEmpty()}


def readme_rows() -> list[tuple[str, str, str | None]]:
    """(keys, action, standard key) of README's table under "Keyboard shortcuts"; the standard key's name
    (QKeySequence.StandardKey) where the row says "(the desktop's NAME key)": its keys are the platform's."""
    rows = []
    for keys, action in re.findall(r"^\| ([^|]+?) \| ([^|]+?) \|$", section("Keyboard shortcuts"), re.M):
        if keys == "keys" or set(keys) <= set("- "):
            continue
        standard = re.fullmatch(r"(.+?) \(the desktop's (\w+) key\)", keys)
        rows.append((standard.group(1), action, standard.group(2)) if standard else (keys, action, None))
    return rows


def readme_menu_row(action: str) -> tuple[str, str] | None:
    """(where + menu, item) of a table row's action that names a menu item, else None."""
    where = COMPARE if action.startswith(COMPARE) else ""
    menu, mark, item = action.removeprefix(COMPARE).partition(" ▸ ")
    return (where + menu, item) if mark else None


def test_the_readme_shortcuts_are_the_menus(make_window, qtbot):
    window = make_window()
    compare = window.open_compare()
    actions = menu_actions(window) | menu_actions(compare, COMPARE)
    rows = readme_rows()
    standard = {readme_menu_row(action): name for _, action, name in rows if name}
    for item, name in standard.items():  # the platform's keys (none on some: Quit offscreen)
        assert item in actions, f"README: {item} is no menu item"
        assert actions[item].shortcut() == QKeySequence(getattr(QKeySequence.StandardKey, name)), (item, name)
    menus = {row for row in menu_shortcuts(actions) if row[1:] not in standard}
    assert ("Ctrl+Shift+K", "Tools", "Compare settings and k…") in menus and len(rows) >= 10 and standard

    listed = {(keys, *readme_menu_row(action)) for keys, action, name in rows if readme_menu_row(action) and not name}
    assert listed == menus, f"README lists {sorted(listed - menus)}; the menus have {sorted(menus - listed)}"

    every = window.findChildren(QAction) + compare.findChildren(QAction)
    bound = {keys_of(action) for action in every} | {keys for keys, _ in WIDGET_KEYS} | \
        {keys_of(shortcut.key()) for shortcut in window.findChildren(QShortcut) + compare.findChildren(QShortcut)}
    table_keys = {key for keys, _, name in rows if not name for key in keys.split(", ")}
    assert not table_keys - bound, f"README's shortcuts bound to nothing: {sorted(table_keys - bound)}"
    standard_keys = {keys_of(actions[item]) for item in standard}
    unlisted = {keys_of(action) for action in every if not action.shortcut().isEmpty()} - table_keys - standard_keys
    assert not unlisted, f"keys missing from README's table: {sorted(unlisted)}"


def test_the_readme_prose_names_real_menu_items_with_their_keys(make_window):
    window = make_window()
    menus = {title: items for title, items in _menu_items(window).items()}
    text = " ".join(readme_text().split())
    named = re.findall(r"\b(Chat|View|Tools|Help) ▸ ([^,;()|]+)", text)
    assert len(named) >= 5
    for menu, item in named:
        assert any(item.strip().startswith(action) for action in menus[menu]), f"{menu} ▸ {item}: no such item"
    shortcuts = menu_shortcuts(menu_actions(window))
    with_keys = re.findall(r"\((\w+) ▸ ([^(),]+), ((?:Ctrl|Shift|Alt|Meta)\+[^\s),]+|F\d+)\)", text)
    assert any(menu == "Tools" for menu, _, _ in with_keys)
    for menu, item, keys in with_keys:
        assert (keys, menu, item) in shortcuts, f"README: ({menu} ▸ {item}, {keys}); the menu: " + \
            str([s for s in shortcuts if s[1:] == (menu, item)] or "no such item with keys")


def _menu_items(window) -> dict[str, list[str]]:
    items = {}
    for entry in window.menuBar().actions():
        if entry.menu():
            items[entry.menu().title().replace("&", "")] = [a.text().replace("&", "") for a in entry.menu().actions()
                                                            if a.text()]
    return items


def test_every_file_that_binds_keys_is_one_whose_window_the_readme_test_opens():
    binders = {path.relative_to(ROOT).as_posix() for path in (ROOT / "gui").rglob("*.py")
               if re.search(r"\bshortcut=|QShortcut\(|\.setShortcuts?\(", path.read_text())}
    assert "gui/views/main/menus.py" in binders
    assert binders <= BINDERS, f"keys bound in {sorted(binders - BINDERS)}: open that window in this test too"

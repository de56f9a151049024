"""The main window (wiring only) and the small dialogs it opens."""

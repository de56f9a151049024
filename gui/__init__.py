"""SpecScope's desktop GUI (PySide6): the chat window with the live speculation visualiser."""

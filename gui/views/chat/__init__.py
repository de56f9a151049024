"""The chat window's parts: transcript, Markdown, message box, settings controls, history sidebar."""

"""What outlives a window: the chat history (SQLite), exports, the recorder, forks, replay, settings."""

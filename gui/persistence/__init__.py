"""What outlives a window: the chat history (schema: its tables and versions; records: what it reads back;
store: SQLite; exports: JSON and Markdown files), the recorder that writes a chat as it happens, forks, replay,
settings."""

"""What a chat request is for: a reply in the chat, or the hidden plain-decoding run that measures the loaded
model's reference speed. The worker's GenerationRequest carries one; the chat session and the main window tell
the two apart by it. Plain Python (no Qt); touches nothing.
"""

from __future__ import annotations

from enum import Enum


class Purpose(Enum):
    CHAT = "chat"  # a reply, shown in the chat and written to the history
    BASELINE = "baseline"  # a hidden plain-decoding run that measures the reference tok/s

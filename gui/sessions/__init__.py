"""What the windows are about, with no Qt: the chat, the comparison, the fastest-setting search, training."""

"""Live panels beside the chat: stats cards, plots, the verify-cost curve."""

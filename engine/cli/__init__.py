"""The engine's commands (generate, bench, models, drafter). No Qt."""

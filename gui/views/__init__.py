"""Widgets that render the session model; they hold no state of their own."""

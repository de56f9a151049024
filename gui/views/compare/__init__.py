"""The compare window and its parts."""

"""The speculative loop and what it is made of: settings, events, the token fold, stats, sampling, verification
and the Engine. Imports nothing from engine.models, engine.measure, engine.remote or engine.cli."""

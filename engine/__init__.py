"""SpecScope's engine: speculative decoding as a plain generator of events. No Qt here, ever."""

__version__ = "0.1.0"

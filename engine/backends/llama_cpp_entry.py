"""The llama.cpp backend's entry point (engine.backends.Backend.load): a GGUF model loads as llama_cpp.load
makes it (a GgufModel with contexts of its own); a Gemma 4 assistant file, which llama.cpp makes no context
of its own for, as llama_cpp_assistant.load does (a draft for method assistant). Which is which comes from
the file's header. Imports both, so that neither imports the other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.backends import LoadedModel, llama_cpp, llama_cpp_assistant

if TYPE_CHECKING:
    from engine.backends.source import ModelSource


def load(name: str, source: "ModelSource", **options) -> LoadedModel:
    if source.gguf_file and llama_cpp_assistant.is_assistant_file(source.file):
        return llama_cpp_assistant.load(name, source, **options)
    return llama_cpp.load(name, source, **options)

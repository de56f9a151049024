"""llama-cpp-python itself, for every llama.cpp module here: the library started once (backend initialised,
its logger replaced by one that keeps errors for our messages), the errors it logged, the bindings of its MTP
calls, the one way weights loaded from a file are freed, and numpy views of its output buffers made once each.

Touches llama.cpp's global state (its backend and logger) and nothing else; imports llama_cpp only when a
model loads. No torch, no Qt.
"""

from __future__ import annotations

import collections
import ctypes
import os
import threading

import numpy as np

from engine.backends import LLAMA_CPP, backend_named
from engine.core.errors import ConfigError, ModelLoadError

BACKEND = LLAMA_CPP
EXT_VERSION = "0.3.36"  # the llama-cpp-python whose llama_cpp_ext binds the MTP calls
_LOG_ERROR, _LOG_CONT = 4, 5  # ggml_log_level

_state_lock = threading.Lock()
_library = None
_log_callback = None  # llama.cpp calls it from C: it must stay referenced, or the process crashes
_errors: collections.deque[str] = collections.deque(maxlen=32)
_bindings = None  # llama_cpp.llama_cpp_ext once checked (mtp_bindings)


def library():
    """The llama_cpp module, with the backend initialised once and its logging quieted (errors are kept for
    our messages, the rest dropped)."""
    global _library, _log_callback
    with _state_lock:
        if _library is None:
            try:
                import llama_cpp
            except ImportError:
                hint = backend_named(BACKEND).install_hint
                raise ModelLoadError(f"the llama.cpp backend needs llama-cpp-python ({hint}); or use "
                                     "--backend transformers") from None
            last_level = [0]

            @llama_cpp.llama_log_callback
            def on_log(level, text, user_data):
                level = last_level[0] if level == _LOG_CONT else level
                last_level[0] = level
                if level == _LOG_ERROR and text:
                    _errors.append(text.decode("utf-8", errors="replace"))

            _log_callback = on_log
            llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _library = llama_cpp
    return _library


def mtp_bindings():
    """llama-cpp-python's bindings of llama.cpp's MTP calls (llama_cpp.llama_cpp_ext, bound by C++ symbol name,
    not a stable API); ConfigError naming the version needed where they are missing."""
    global _bindings
    if _bindings is not None:
        return _bindings
    lib = library()
    try:
        from llama_cpp import llama_cpp_ext
        for name in ("llama_set_embeddings_nextn", "llama_get_embeddings_nextn", "llama_get_embeddings_nextn_ith",
                     "llama_set_nextn_layer_offset", "llama_get_ctx_other"):
            getattr(llama_cpp_ext, name)
        for name in ("llama_model_n_layer_nextn", "LLAMA_CONTEXT_TYPE_MTP"):
            getattr(lib, name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"MTP drafting on llama.cpp needs llama-cpp-python {EXT_VERSION} (its llama_cpp_ext "
                          f"bindings: {str(exc)[:80]}); this is {getattr(lib, '__version__', '?')}: "
                          f"pip install llama-cpp-python=={EXT_VERSION}") from None
    _bindings = llama_cpp_ext
    return _bindings


class BufferViews:
    """numpy views of llama.cpp's output buffers (logits, hidden states), each made once per address and shape:
    llama.cpp keeps a buffer in place until it grows it, and np.ctypeslib.as_array costs ~10 µs a call."""

    def __init__(self) -> None:
        self._views: dict[tuple, np.ndarray] = {}

    def of(self, pointer, shape: tuple[int, ...]) -> np.ndarray:
        key = (ctypes.addressof(pointer.contents), shape)
        view = self._views.get(key)
        if view is None:
            if len(self._views) > 64:  # llama.cpp moved its buffers: forget the old addresses' views
                self._views.clear()
            view = self._views[key] = np.ctypeslib.as_array(pointer, shape=shape)
        return view

    def clear(self) -> None:
        self._views.clear()


def clear_errors() -> None:
    """Forget what llama.cpp logged so far: the next call's errors are its own."""
    _errors.clear()


def last_error(default: str) -> str:
    """What llama.cpp last logged as an error, in its own words (one line), or `default`."""
    text = " ".join(line.strip() for line in _errors if line.strip())
    marker = "error loading model: "
    if marker in text:  # "llama_model_load: error loading model: <reason> llama_model_load_from_file…"
        text = text.rsplit(marker, 1)[1].split(" llama_model_load", 1)[0]
    text = text.strip().rstrip(".")
    return text[:240] if text else default


def memory_check_on() -> bool:
    """SPECSCOPE_SKIP_MEMORY_CHECK=1 turns the memory checks off, as for the transformers backend."""
    return os.environ.get("SPECSCOPE_SKIP_MEMORY_CHECK", "") in ("", "0")


class HeldWeights:
    """What holds a llama_model's weights loaded from a file (a GGUF model, an MTP head file, a Gemma 4
    assistant): `handle` is freed once, by release_weights() or when the holder is dropped."""

    lib = None  # the llama_cpp module
    handle = None  # the llama_model pointer, None once freed (or before it loaded)

    def release_weights(self) -> None:
        """Free the weights (once; nothing to do where none are held)."""
        handle, self.handle = self.handle, None
        if handle:
            self.lib.llama_model_free(handle)

    def __del__(self) -> None:
        try:
            self.release_weights()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

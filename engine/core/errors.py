"""Typed errors. Each carries one clear sentence meant for the user (CLI exit 2, a message in the GUI).
Imports nothing; every engine module may raise these."""


class SpecScopeError(Exception):
    """Base of every error the engine raises on purpose."""


class ConfigError(SpecScopeError, ValueError):
    """A setting is out of range or a combination makes no sense."""


class ModelLoadError(SpecScopeError):
    """A model path, file or cache entry could not be turned into a model."""


class DefaultModelMissingError(ModelLoadError):
    """The built-in default model's package is not installed."""


class TokenizerMismatchError(SpecScopeError):
    """The draft's tokenizer is not the target's; names the first difference, and carries it as data
    (`difference`: an engine.core.compat.TokenizerDifference, None when the message is all there is)."""

    def __init__(self, message: str, difference=None) -> None:
        super().__init__(message)
        self.difference = difference


class PromptTooLongError(SpecScopeError):
    """The prompt (plus at least one new token) does not fit in the model's context."""


class DeviceError(SpecScopeError):
    """The requested device is not available on this machine."""


class OutOfMemoryError(SpecScopeError):
    """The device ran out of memory while loading or generating."""


class DownloadError(SpecScopeError):
    """A model could not be downloaded: offline, hub unreachable, unknown, gated or private repository."""


class DownloadCancelledError(DownloadError):
    """The user cancelled a download; the files that finished are kept and a retry continues from them."""


class UnsafeCheckpointError(DownloadError):
    """A repository has its weights only as pickle checkpoints, which need the user's explicit consent."""


class ServerError(SpecScopeError):
    """A remote inference server (engine.remote.engine) could not be reached, refused, or is not what it should be."""

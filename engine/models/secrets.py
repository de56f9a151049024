"""The Hugging Face token, kept in the operating system's keyring (service "specscope", user "huggingface"),
and each inference server's API key (user "server <origin>", sent only to that server by engine.remote.engine),
for the CLI (`specscope models download --token-from-keyring`) and the app (settings, model manager) alike.

When no keyring backend works (a headless Linux without Secret Service, keyring's fail or null backend, a
locked or refusing store), the token is kept in this process's memory only, for this session, and
`TokenStore.storage` says so (`TokenStorage.SESSION`) so that the settings can tell the user.

The token is never written to a file, a log or an exception message: errors raised here carry a fixed text
and are raised `from None`, so the keyring's own error (which might echo what it was given) is not chained.
Touches the OS keyring (through `keyring`) and nothing else; no Qt.
"""

from __future__ import annotations

import enum
import threading

SERVICE = "specscope"
USERNAME = "huggingface"


class TokenStorage(enum.Enum):
    KEYRING = "keyring"  # saved in the OS keyring: survives restarts
    SESSION = "session"  # no usable keyring: kept in memory until the app quits


class SecretStoreError(Exception):
    """The keyring failed in a way that is not just 'there is no keyring'. Its text never holds the token."""


def mask(token: str | None) -> str:
    """A display form that shows only that a token is set and its last 4 characters (hf_…abcd)."""
    if not token:
        return ""
    return f"{token[:3]}…{token[-4:]}" if len(token) > 10 else "…"


class TokenStore:
    """Get, set and delete the Hugging Face token. Thread-safe; one instance per app is enough."""

    def __init__(self, service: str = SERVICE, username: str = USERNAME, what: str = "a Hugging Face token") -> None:
        self.service, self.username, self.what = service, username, what
        self._session_token: str | None = None
        self._session_only = False  # the keyring failed once: stay in memory for the rest of the session
        self._lock = threading.Lock()

    # -- where it lives
    @property
    def storage(self) -> TokenStorage:
        """Where a token is (or would be) kept right now."""
        return TokenStorage.SESSION if self._session_only or not self.keyring_available() else \
            TokenStorage.KEYRING

    def backend_name(self) -> str:
        """The keyring backend in words (for the settings), e.g. 'SecretService Keyring'."""
        try:
            import keyring
            backend = keyring.get_keyring()
            return getattr(backend, "name", type(backend).__name__)
        except Exception:  # noqa: BLE001 -- a broken keyring install is 'none'
            return "none"

    @staticmethod
    def keyring_available() -> bool:
        """A real keyring backend is configured (not keyring's fail or null backend)."""
        try:
            import keyring
            from keyring.backends import fail, null
            backend = keyring.get_keyring()
        except Exception:  # noqa: BLE001
            return False
        unusable = (fail.Keyring, null.Keyring)
        if isinstance(backend, unusable):
            return False
        chained = getattr(backend, "backends", None)  # keyring's ChainerBackend
        if chained is not None:
            return any(not isinstance(b, unusable) for b in chained)
        return True

    # -- operations
    def get(self) -> str | None:
        with self._lock:
            if self._session_only or not self.keyring_available():
                return self._session_token
            try:
                import keyring
                token = keyring.get_password(self.service, self.username)
            except Exception:  # noqa: BLE001 -- no keyring, a locked one, a broken D-Bus: this session only
                self._session_only = True
                return self._session_token
            return token if token is not None else self._session_token

    def set(self, token: str) -> TokenStorage:
        """Save the token; returns where it went (KEYRING, or SESSION when no keyring works)."""
        token = (token or "").strip()
        if not token:
            raise ValueError("the token is empty")
        if any(c.isspace() for c in token):
            raise ValueError(f"{self.what} has no spaces or line breaks")
        with self._lock:
            if not self._session_only and self.keyring_available():
                try:
                    import keyring
                    keyring.set_password(self.service, self.username, token)
                    self._session_token = None
                    return TokenStorage.KEYRING
                except Exception:  # noqa: BLE001 -- a keyring that will not take it: keep it for this session
                    pass
            self._session_only = True
            self._session_token = token
            return TokenStorage.SESSION

    def delete(self) -> None:
        """Forget the token everywhere it may be (no error when there is none)."""
        with self._lock:
            self._session_token = None
            if not self.keyring_available():
                return
            try:
                import keyring
                from keyring.errors import PasswordDeleteError
                try:
                    keyring.delete_password(self.service, self.username)
                except PasswordDeleteError:
                    pass
            except Exception as exc:  # noqa: BLE001
                if not _is_no_keyring(exc):
                    raise SecretStoreError("the system keyring could not delete the token") from None

    def has_token(self) -> bool:
        return bool(self.get())


def _is_no_keyring(exc: BaseException) -> bool:
    from keyring.errors import InitError, NoKeyringError
    return isinstance(exc, (NoKeyringError, InitError))


_default: TokenStore | None = None
_default_lock = threading.Lock()


def default_store() -> TokenStore:
    """The app's one TokenStore (so that a session-only token is seen by every part of the app)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TokenStore()
        return _default


def get_token() -> str | None:
    return default_store().get()


def set_token(token: str) -> TokenStorage:
    return default_store().set(token)


def delete_token() -> None:
    default_store().delete()


def token_storage() -> TokenStorage:
    return default_store().storage


# ---- API keys of inference servers (engine.remote.engine): one keyring entry per server address, sent only there

SERVER_USER_PREFIX = "server "
_servers: dict[str, TokenStore] = {}


def server_store(origin: str) -> TokenStore:
    """The key store of one server, by its origin (`https://host:port`, engine.remote.client's
    ServerAddress.origin): keyring user "server https://host:port" under the same service."""
    with _default_lock:
        if origin not in _servers:
            _servers[origin] = TokenStore(username=SERVER_USER_PREFIX + origin, what="an API key")
        return _servers[origin]


def server_key(origin: str) -> str | None:
    return server_store(origin).get()


def set_server_key(origin: str, key: str) -> TokenStorage:
    return server_store(origin).set(key)


def delete_server_key(origin: str) -> None:
    server_store(origin).delete()

"""The Hugging Face token (engine/models/secrets.py, no Qt): keyring round trip, the session-only fallback when there is
no keyring, and the token in no file, log or error the app writes."""

from __future__ import annotations

import logging

import keyring
import pytest
from keyring.backends import fail
from keyring.errors import KeyringLocked

from engine.models import secrets
from engine.models.secrets import TokenStorage, TokenStore
from gui.persistence.exports import conversation_json
from gui.persistence.store import HistoryStore
from memory_keyring import MemoryKeyring

TOKEN = "hf_TestToken_9f8e7d6c5b4a3210"


class LockedKeyring(MemoryKeyring):
    def get_password(self, service, username):
        raise KeyringLocked("the collection is locked")

    def set_password(self, service, username, password):
        raise KeyringLocked("the collection is locked")


@pytest.fixture
def use_keyring():
    previous = keyring.get_keyring()

    def use(backend):
        keyring.set_keyring(backend)
        return backend

    yield use
    keyring.set_keyring(previous)


def test_token_round_trip_through_the_keyring(use_keyring):
    backend = use_keyring(MemoryKeyring())
    store = TokenStore()
    assert store.storage is TokenStorage.KEYRING and store.get() is None and not store.has_token()
    assert store.set(f"  {TOKEN}\n") is TokenStorage.KEYRING
    assert backend.items == {("specscope", "huggingface"): TOKEN}
    assert TokenStore().get() == TOKEN  # a new store (a restart) finds it
    store.delete()
    assert backend.items == {} and TokenStore().get() is None
    store.delete()  # nothing to delete is fine
    with pytest.raises(ValueError, match="empty"):
        store.set("   ")
    with pytest.raises(ValueError, match="no spaces"):
        store.set("hf_abc def")
    assert secrets.mask(TOKEN) == "hf_…3210" and TOKEN not in secrets.mask(TOKEN)


def test_no_keyring_keeps_the_token_for_this_session_only(use_keyring):
    use_keyring(fail.Keyring())
    store = TokenStore()
    assert not store.keyring_available() and store.storage is TokenStorage.SESSION
    assert store.set(TOKEN) is TokenStorage.SESSION
    assert store.get() == TOKEN
    assert TokenStore().get() is None  # not saved anywhere: the next start asks again
    store.delete()
    assert store.get() is None


def test_a_locked_keyring_falls_back_to_the_session(use_keyring):
    use_keyring(LockedKeyring())
    store = TokenStore()
    assert store.set(TOKEN) is TokenStorage.SESSION
    assert store.get() == TOKEN and store.storage is TokenStorage.SESSION


def test_module_functions_share_one_store(use_keyring, monkeypatch):
    use_keyring(MemoryKeyring())
    monkeypatch.setattr(secrets, "_default", None)
    assert secrets.set_token(TOKEN) is TokenStorage.KEYRING and secrets.token_storage() is TokenStorage.KEYRING
    assert secrets.get_token() == TOKEN
    secrets.delete_token()
    assert secrets.get_token() is None


def test_the_token_is_in_no_file_log_or_error(use_keyring, tmp_path, monkeypatch, caplog):
    for variable in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.DEBUG)
    use_keyring(fail.Keyring())  # the worst case: the token only lives in memory
    store = TokenStore()
    store.set(TOKEN)
    with HistoryStore() as history:  # the app writes its history meanwhile
        cid = history.create_conversation("Download a model", {"model": "meta-llama/Llama-3.1-8B"})
        history.add_user_message(cid, "hello")
        conversation_json(history.load_conversation(cid))
    use_keyring(LockedKeyring())
    assert TokenStore().get() is None
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "history.sqlite3" for p in written)
    for path in written:
        assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in caplog.text

"""An in-memory keyring backend for the GUI tests (the OS keyring is never touched)."""

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self):
        super().__init__()
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.items.get((service, username))

    def set_password(self, service, username, password):
        self.items[(service, username)] = password

    def delete_password(self, service, username):
        try:
            del self.items[(service, username)]
        except KeyError:
            raise PasswordDeleteError("not there") from None

"""Downloads: only https endpoints (plain http for this computer only), and the token goes to the
configured endpoint's host alone, redirects included (engine.models.hub's request hook)."""

from __future__ import annotations

import pytest

from engine.models import hub
from engine.core.errors import DownloadError


@pytest.mark.parametrize("endpoint", ["http://example.com", "ftp://127.0.0.1", "http://10.0.0.5:8080",
                                      "example.com", "http://localhost.evil.com"])
def test_an_endpoint_that_is_not_https_is_refused(endpoint):
    with pytest.raises(DownloadError, match="must be an https://"):
        hub.resolve_endpoint(endpoint)


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8123", "http://localhost:9", "https://mirror.example/"])
def test_https_or_this_computer_is_accepted(endpoint):
    assert hub.resolve_endpoint(endpoint) == endpoint.rstrip("/")


def test_hf_endpoint_is_checked_too(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.example")
    with pytest.raises(DownloadError, match="HF_ENDPOINT"):
        hub.resolve_endpoint()


def _request(url: str):
    from huggingface_hub.utils._http import httpx2

    return httpx2.Request("GET", url, headers={"authorization": "Bearer hf_secret"})


def test_the_token_reaches_the_endpoint_only():
    hub.resolve_endpoint("https://mirror.example")
    same = _request("https://mirror.example/api/models/a/b")
    hub._strip_foreign_token(same)
    assert same.headers["authorization"] == "Bearer hf_secret"
    for elsewhere in ("https://cdn.example/blob", "https://huggingface.co/a/b/resolve/main/x",
                      "http://mirror.example/api", "https://mirror.example:8443/api"):
        request = _request(elsewhere)
        hub._strip_foreign_token(request)
        assert "authorization" not in request.headers, elsewhere


def test_the_hook_is_on_huggingface_hubs_own_client():
    from huggingface_hub.utils._http import get_session

    hub.resolve_endpoint("http://127.0.0.1:1")
    assert hub._strip_foreign_token in get_session().event_hooks["request"]

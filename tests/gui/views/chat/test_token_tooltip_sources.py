"""The transcript's token tooltip names the draft model's own tokens that spelled a drafted token (a draft of
another tokenizer: engine.drafters.cross_tokenizer), and says nothing of them for any other token."""

from __future__ import annotations

from engine.core.events import TokenStatus
from engine.core.tokens import DisplayToken
from gui.views.chat.token_tooltip import describe_token


def token(status: TokenStatus, source: str | None) -> DisplayToken:
    return DisplayToken(text="hello", status=status, round_index=2, position=0, draft_length=3, p_target=0.7,
                        p_draft=None, drafter="draft-model", token_id=9, draft_source=source)


def test_the_tooltip_shows_the_draft_tokens_behind_a_target_token():
    text = describe_token(token(TokenStatus.ACCEPTED, "hel · lo"))
    assert "drafted as the draft model's tokens: hel · lo" in text
    assert "drafted as" in describe_token(token(TokenStatus.REJECTED, " world"))
    assert "drafted as" not in describe_token(token(TokenStatus.ACCEPTED, None))
    assert "drafted as" not in describe_token(token(TokenStatus.SUBSTITUTED, None))

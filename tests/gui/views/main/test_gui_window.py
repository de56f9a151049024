"""The chat window driven by the scripted FakeEngine: transcript formats, tooltips, graphs, controls, Stop."""

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QColor, QHelpEvent, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QApplication, QToolTip

from engine.core.errors import PromptTooLongError
from engine.core.events import TokenStatus
from gui import theme
from fakes import FakeEngine
from plot_probe import plotted
from transcript_probe import background, fragments

WAIT_MS = 10_000  # generous: a slow CI machine is not a failure


def test_transcript_draws_each_status_with_its_format(make_window, send_and_wait):
    window = make_window(FakeEngine())
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=60)
    turn = send_and_wait(window)
    palette = theme.LIGHT
    seen = {}
    for token, fmt, text, _ in fragments(window):
        seen.setdefault(token.status, []).append((fmt, text))
    assert set(seen) == {TokenStatus.PLAIN, TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.SUBSTITUTED,
                         TokenStatus.BONUS}
    for status, drawn in seen.items():
        style = palette.status(status)
        for fmt, _ in drawn:
            assert background(fmt) in ({style.background, style.background_alt} if style.background else {None})
            assert fmt.fontStrikeOut() == style.strike
    underline = {status: {fmt.underlineStyle() for fmt, _ in drawn} for status, drawn in seen.items()}
    assert underline[TokenStatus.SUBSTITUTED] == {QTextCharFormat.UnderlineStyle.SingleUnderline}
    assert underline[TokenStatus.BONUS] == {QTextCharFormat.UnderlineStyle.DotLine}
    assert underline[TokenStatus.ACCEPTED] == {QTextCharFormat.UnderlineStyle.NoUnderline}
    rejected_colour = {fmt.foreground().color().name() for fmt, _ in seen[TokenStatus.REJECTED]}
    assert rejected_colour == {palette.status(TokenStatus.REJECTED).foreground}
    # the committed tokens, in order, are exactly the reply laid out as Markdown: a blank line becomes a paragraph
    # break, a single newline a line break (U+2028)
    committed = "".join(text for token, _, text, _ in fragments(window) if token.committed)
    assert committed.replace("\u2028", "\n") == turn.text.replace("\n\n", "").strip("\n")
    # a footer with the stats closes the turn
    assert "60 tokens" in window.transcript.toPlainText()


def test_hiding_rejected_drafts_removes_only_the_ghosts(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    turn = send_and_wait(window)
    ghosts = [t for t in turn.tokens if t.status is TokenStatus.REJECTED]
    assert ghosts and any(text for _, _, text, _ in fragments(window) if "quickly" in text)
    window.legend.show_rejected.setChecked(False)
    drawn = fragments(window)
    assert all(token.committed for token, *_ in drawn)
    visible = [t for t in turn.tokens if t.text.strip("\n")]  # a newline token draws a paragraph break
    assert len(drawn) == len([t for t in visible if t.committed])
    assert not window.rejected_action.isChecked()
    window.rejected_action.setChecked(True)
    assert len(fragments(window)) == len(visible)


def test_tooltip_carries_status_round_position_and_probabilities(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=30)
    send_and_wait(window)
    view = window.transcript
    by_status = {}
    for token, _, text, position in fragments(window):
        if text.strip():
            by_status.setdefault(token.status, (token, position))
    token, position = by_status[TokenStatus.ACCEPTED]
    cursor = QTextCursor(view.document())
    cursor.setPosition(position)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    rect = view.cursorRect(cursor)
    point = QPoint(rect.left() + 3, rect.center().y())
    assert view.token_at(point) == token
    event = QHelpEvent(QEvent.Type.ToolTip, point, view.viewport().mapToGlobal(point))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.waitUntil(lambda: QToolTip.isVisible(), timeout=WAIT_MS)
    tip = QToolTip.text()
    assert "accepted" in tip and f"round {token.round_index}" in tip
    assert f"draft position {token.position + 1} of 4" in tip  # counted from 1 for a person
    assert f"p_target {token.p_target:.3f}" in tip and f"p_draft {token.p_draft:.3f}" in tip
    assert "proposed by: draft-model" in tip
    QToolTip.hideText()
    # every status says where it came from; the correction names the draft it replaced
    from gui.views.chat.transcript import describe_token
    substituted, _ = by_status[TokenStatus.SUBSTITUTED]
    text = describe_token(substituted)
    assert "substituted" in text and "replaced the draft" in text and "p_target 0.750" in text
    rejected, _ = by_status[TokenStatus.REJECTED]
    assert "p_target 0.050" in describe_token(rejected) and "p_draft" in describe_token(rejected)
    assert "after all 4 drafted tokens" in describe_token(by_status[TokenStatus.BONUS][0])


def test_prompt_lookup_tooltip_says_the_draft_is_one_hot(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(method="prompt-lookup", k=3, max_new_tokens=30)
    turn = send_and_wait(window)
    from gui.views.chat.transcript import describe_token
    accepted = next(t for t in turn.tokens if t.status is TokenStatus.ACCEPTED)
    assert "one-hot" in describe_token(accepted) and "prompt-lookup" in describe_token(accepted)


def test_graphs_receive_the_series_of_the_rounds(make_window, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=80)
    rounds = []
    window.worker_thread.worker.round_verified.connect(lambda _rid, event: rounds.append(event))
    window.refresh_timer.setInterval(600_000)  # only the final refresh draws: never once per round
    calls = []
    original = window.plots.update_from
    window.plots.update_from = lambda *args: (calls.append(1), original(*args))
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        window.send("go")
    assert len(rounds) > 10 and len(calls) == 1

    # expected series, computed from the events by hand
    drafted = accepted = tokens = 0
    cumulative_x, cumulative_y = [], []
    drafted_at, accepted_at, histogram = [0] * 4, [0] * 4, [0] * 5
    for event in rounds:
        tokens += len(event.committed_ids)
        if event.draft_ids:
            drafted += len(event.draft_ids)
            accepted += event.n_accepted
            cumulative_x.append(tokens)
            cumulative_y.append(100.0 * accepted / drafted)
            for i in range(len(event.draft_ids)):
                drafted_at[i] += 1
                accepted_at[i] += i < event.n_accepted
            histogram[event.n_accepted] += 1
    series = plotted(window.plots)
    assert series["acceptance_cumulative"][0] == cumulative_x
    assert series["acceptance_cumulative"][1] == [round(v, 9) for v in cumulative_y] or \
        all(abs(a - b) < 1e-9 for a, b in zip(series["acceptance_cumulative"][1], cumulative_y))
    assert len(series["acceptance_rolling"][0]) == len(cumulative_x)
    assert series["per_position"][0] == [1, 2, 3, 4]
    assert all(abs(a - 100.0 * n / d) < 1e-9 for a, n, d in zip(series["per_position"][1], accepted_at, drafted_at))
    assert series["histogram"] == ([0, 1, 2, 3, 4], [float(n) for n in histogram])
    assert len(series["speed_cumulative"][0]) == len(rounds) - 1
    strip = window.stats_strip
    assert strip.acceptance.value.text() == f"{accepted / drafted:.0%}"
    assert strip.speedup.value.text() == "—"  # plain speed not measured yet
    assert not window.plots.baseline_line.isVisible()


def test_plain_speed_becomes_the_reference_line_and_the_speedup(make_window, send_and_wait, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=40)
    send_and_wait(window)
    with qtbot.waitSignal(window.baseline_measured, timeout=WAIT_MS) as blocker:
        window.stats_strip.measure.click()
    baseline = blocker.args[0]
    assert baseline > 0 and window.engine.calls[-1].spec.method == "none"
    assert len(window.session.turns) == 2  # the measuring run is not part of the chat
    window.refresh_live_views()
    assert window.plots.baseline_line.isVisible() and window.plots.baseline_line.value() == baseline
    assert window.stats_strip.speedup.value.text().endswith("×")


def test_stop_keeps_what_was_committed(make_window, qtbot):
    engine = FakeEngine(pause_after=6)
    window = make_window(engine)
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=500)
    window.send("go")
    qtbot.waitUntil(lambda: window.session.current is not None and window.session.live.accumulator.rounds == 6,
                    timeout=WAIT_MS)
    assert window.stop_button.isEnabled() and not window.send_button.isEnabled()
    text_so_far = window.session.current.text
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        window.stop_button.click()
    turn = blocker.args[0]
    assert turn.stop_reason == "cancelled" and turn.text == text_so_far and text_so_far
    assert "stopped" in window.transcript.toPlainText()
    assert not window.stop_button.isEnabled() and window.send_button.isEnabled()
    # the conversation continues with what was kept
    engine.pause_after = None
    window.controls.apply(max_new_tokens=5)
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        window.send("more")
    assert {"role": "assistant", "content": text_so_far} in engine.calls[-1].conversation


def test_escape_stops(make_window, qtbot):
    engine = FakeEngine(pause_after=3)
    window = make_window(engine)
    window.send("go")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 3, timeout=WAIT_MS)
    window.activateWindow()
    window.message_box.setFocus()
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        qtbot.keyClick(window.message_box, Qt.Key.Key_Escape)
    assert blocker.args[0].stop_reason == "cancelled"


def test_enter_sends_and_shift_enter_adds_a_line(make_window, qtbot):
    window = make_window()
    window.controls.apply(max_new_tokens=5)
    qtbot.keyClicks(window.message_box, "first line")
    qtbot.keyClick(window.message_box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.message_box, "second line")
    assert window.message_box.toPlainText() == "first line\nsecond line"
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    assert window.engine.calls[0].conversation[-1] == {"role": "user", "content": "first line\nsecond line"}
    assert window.message_box.toPlainText() == ""


def test_a_changed_k_applies_to_the_next_message(make_window, qtbot):
    engine = FakeEngine(pause_after=2)
    window = make_window(engine)
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=30)
    window.send("first")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 2, timeout=WAIT_MS)
    window.controls.k.setValue(6)
    assert not window.controls.notice.isHidden()  # "Changes apply from the next message."
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        engine.resume.set()
    first = blocker.args[0]
    assert engine.calls[0].spec.k == 4 and first.spec_label == "draft-model:k=4,draft=default"
    assert max(t.draft_length for t in first.tokens) == 4
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS) as blocker:
        window.send("second")
    assert engine.calls[1].spec.k == 6 and max(t.draft_length for t in blocker.args[0].tokens) == 6
    window.refresh_live_views()
    assert plotted(window.plots)["per_position"][0] == [1, 2, 3, 4, 5, 6]
    # multi-turn: the second request carries the whole history
    assert [m["role"] for m in engine.calls[1].conversation] == ["user", "assistant", "user"]
    assert engine.calls[1].conversation[1]["content"] == first.text


def test_system_prompt_and_new_chat(make_window, send_and_wait):
    window = make_window()
    window.controls.apply(max_new_tokens=5, system_prompt="You are terse.")
    send_and_wait(window, "hello")
    assert window.engine.calls[0].conversation[0] == {"role": "system", "content": "You are terse."}
    window.chat.new_chat_button.click()
    assert window.session.turns == [] and window.transcript.document().isEmpty()
    send_and_wait(window, "again")
    assert [m["role"] for m in window.engine.calls[1].conversation] == ["system", "user"]


def test_invalid_combination_is_refused_in_place(make_window):
    window = make_window()  # the fake model has 12 layers
    controls = window.controls
    assert controls.draft.isEnabled() is False and controls.param_controls["layers"].isEnabled() is False
    controls.apply(method="early-exit", layers=12)
    assert controls.param_controls["layers"].isEnabled()
    assert "from 1 to 11 for this model (12 layers)" in controls.problem.text() and controls.problem.isVisible()
    assert not window.send_button.isEnabled()
    assert window.send("hello") is False and window.session.turns == [] and window.engine.calls == []
    controls.apply(layers=6)
    assert controls.problem.isHidden() and window.send_button.isEnabled()
    controls.apply(method="draft-model", draft="")
    assert "needs a draft model" in controls.problem.text() and controls.draft.isEnabled()


def test_engine_refusal_is_shown_and_the_message_is_kept(make_window, qtbot):
    window = make_window()
    window.controls.apply(method="draft-model", draft="mismatch", max_new_tokens=10)
    with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS) as blocker:
        window.send("keep this message")
    assert "tokenizer differs" in blocker.args[0]
    assert "tokenizer differs" in window.controls.problem.text()
    assert window.message_box.toPlainText() == "keep this message"
    assert window.session.turns == [] and "Not generated" in window.transcript.toPlainText()
    assert window.send_button.isEnabled()
    window.controls.apply(draft="default")  # changing a setting clears the refusal
    assert window.controls.problem.isHidden()


def test_engine_errors_become_messages(make_window, qtbot):
    engine = FakeEngine(fail_with=PromptTooLongError("the prompt has 9000 tokens but the model holds 8192"))
    window = make_window(engine)
    with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS) as blocker:
        window.send("long")
    assert "9000 tokens" in blocker.args[0]
    engine.fail_with = RuntimeError("kaboom")
    with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS) as blocker:
        window.send("again")
    assert "unexpected error" in blocker.args[0] and "kaboom" in blocker.args[0]
    assert window.worker_thread.thread.isRunning()  # the worker survives and serves the next message
    engine.fail_with = None
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        window.send("fine")


def test_model_load_failure_is_a_message_not_a_crash(qtbot):
    from engine.core.errors import ModelLoadError
    from gui.views.main.window import MainWindow

    def loader(name, progress=None, **options):
        raise ModelLoadError(f"{name} could not be loaded as a causal language model (no config.json)")

    window = MainWindow(loader=loader, palette=theme.LIGHT)
    qtbot.addWidget(window)
    try:
        with qtbot.waitSignal(window.request_failed, timeout=WAIT_MS) as blocker:
            window.start()
        assert "no config.json" in blocker.args[0] and "no config.json" in window.status_label.text()
        assert not window.send_button.isEnabled() and window.send("hi") is False
    finally:
        window.shutdown()


def test_closing_mid_generation_stops_the_worker(make_window, qtbot):
    engine = FakeEngine(pause_after=4)
    window = make_window(engine)
    window.send("go")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 4, timeout=WAIT_MS)
    assert window.worker_thread.thread.isRunning()
    window.close()
    assert not window.worker_thread.thread.isRunning()
    assert window.worker_thread.worker.cancel.is_set()


def test_dark_theme_uses_the_dark_palette(make_window, send_and_wait):
    window = make_window(palette=theme.DARK)
    window.controls.apply(method="draft-model", draft="default", k=4, max_new_tokens=20)
    send_and_wait(window)
    accepted = {background(fmt) for token, fmt, *_ in fragments(window) if token.status is TokenStatus.ACCEPTED}
    dark = theme.DARK.status(TokenStatus.ACCEPTED)
    assert accepted <= {dark.background, dark.background_alt} and accepted
    window.set_theme(theme.LIGHT)
    accepted = {background(fmt) for token, fmt, *_ in fragments(window) if token.status is TokenStatus.ACCEPTED}
    light = theme.LIGHT.status(TokenStatus.ACCEPTED)
    assert accepted <= {light.background, light.background_alt} and accepted
    assert QColor(theme.DARK.surface).lightness() < 80 < QColor(theme.LIGHT.surface).lightness()


def test_changing_the_model_loads_it_and_a_failed_load_keeps_the_old_one(qtbot):
    from engine.core.errors import ModelLoadError
    from fakes import FakeModel
    from gui.views.main.window import MainWindow

    engines, loads = {}, []

    def loader(name, progress=None, **options):
        loads.append(name)
        if name == "broken":
            raise ModelLoadError("broken could not be loaded as a causal language model (no config.json)")
        engines[name] = FakeEngine(target=FakeModel(name=f"model {name}", n_layers=8 if name == "small" else 12))
        return engines[name]

    window = MainWindow(loader=loader, palette=theme.LIGHT)
    qtbot.addWidget(window)
    try:
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS):
            window.start()
        line = window.controls.model.lineEdit()
        line.selectAll()
        qtbot.keyClicks(line, "small")
        with qtbot.waitSignal(window.model_ready, timeout=WAIT_MS) as blocker:
            qtbot.keyClick(line, Qt.Key.Key_Return)
        assert blocker.args[0].requested == "small" and "model small" in window.controls.model_status.text()
        # early-exit layers follow the loaded model: out of its range, refused with the range (never clamped)
        window.controls.apply(method="early-exit", layers=40)
        assert window.controls.param_controls["layers"].value() == 40
        assert "from 1 to 7 for this model (8 layers), got 40" in window.controls.problem.text()
        window.controls.apply(method="none", layers=0)
        with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
            window.send("hi")
        assert len(engines["small"].calls) == 1 and engines["default"].calls == []
        first_small = engines["small"]
        failures = []
        window.request_failed.connect(failures.append)
        # the failure, then the old model loaded again (it was freed before the new one was tried)
        with qtbot.waitSignals([window.request_failed, window.model_ready], timeout=WAIT_MS):
            window.load_model("broken")
        assert "no config.json" in failures[0]
        assert window.controls.model_name() == "small" and window.send_button.isEnabled()
        with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
            window.send("still here")
        # the old model was freed before the new one was tried (a GPU holds one), then loaded again: the chat goes on
        assert loads == ["default", "small", "broken", "small"] and first_small.releases >= 1
        second_small = engines["small"]
        assert second_small is not first_small and len(second_small.calls) == 1
        assert second_small.calls[0].conversation[-1]["content"] == "still here"
        assert "model small" in window.controls.model_status.text()
    finally:
        window.shutdown()


class DraftLoadingEngine(FakeEngine):
    """Reports loading its draft model the way the real engine does (Engine.on_status, given when the worker loads it)."""

    def validate(self, spec):
        if spec.method == "draft-model" and self.on_status is not None:
            self.on_status(f"Loading draft model {spec.draft}…")
        super().validate(spec)


def test_loading_the_draft_model_shows_in_the_status_line(make_window, qtbot):
    engine = DraftLoadingEngine(pause_after=1)  # holds the reply after its first round
    window = make_window(engine)
    window.controls.apply(method="draft-model", draft="small-draft", max_new_tokens=30)
    assert window.send("go")
    qtbot.waitUntil(lambda: window.session.live.accumulator.rounds == 1, timeout=WAIT_MS)
    assert window.status_label.text() == "Loading draft model small-draft…"
    with qtbot.waitSignal(window.reply_finished, timeout=WAIT_MS):
        engine.resume.set()
    assert window.status_label.text().startswith("Done · 30 tokens")

"""The terminal of the engine's commands: one-line errors (exit 2) and warnings on stderr, and for `specscope
generate` tokens coloured by status (the fold of engine.core.tokens, the one the GUI and the history use),
then one stats line. Writes to the console only (rich); text that isn't ours (notes, errors) is escaped before
it goes through rich markup."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from engine.core.methods import plain_method
from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified, TokenStatus
from engine.core.tokens import fold_round

EXIT_BAD_INPUT = 2


class Parser(argparse.ArgumentParser):
    """The engine's commands' parser (and, as parser_class, their subparsers'): no abbreviated options (`--tree-dep`
    is not `--tree-depth`), argparse's own errors in one line."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})

    def error(self, message: str):  # argparse's own errors: one line, exit 2
        self.exit(EXIT_BAD_INPUT, f"specscope: error: {message}\n")


def warn(message: str) -> None:
    print(f"specscope: warning: {message}", file=sys.stderr)


STYLES = {
    TokenStatus.PLAIN: "",
    TokenStatus.ACCEPTED: "green",
    TokenStatus.SUBSTITUTED: "bold dark_orange underline",
    TokenStatus.BONUS: "bold cyan",
    TokenStatus.REJECTED: "dim red strike",
}


def stats_line(finished: GenerationFinished) -> str:
    s = finished.stats
    parts = [f"{s.committed_tokens} tokens", f"{s.tok_per_s:.1f} tok/s", f"TTFT {s.ttft_seconds:.2f} s"]
    if finished.server is not None:  # a server's reply: its figures, said to be its own (no times to compare)
        from engine.remote.engine import server_figures_words
        parts += server_figures_words(finished.server)
    elif s.drafted_tokens:
        acceptance = f"acceptance {s.acceptance_rate:.0%}"
        if len(s.by_drafter) > 1:  # a combined method: each drafter's own
            acceptance += " (" + ", ".join(f"{name} {rate:.0%} of {drafted}"
                                           for name, drafted, _a, rate in s.drafter_acceptance()) + ")"
        parts += [acceptance, f"mean accepted length {s.mean_accepted_length:.2f}",
                  f"theoretical ×{s.theoretical_speedup:.2f}",
                  f"draft {s.draft_seconds:.2f} s / verify {s.verify_seconds:.2f} s"
                  + (f" (network {s.network_seconds:.2f} s of it)" if s.network_seconds else "")]
    parts.append(f"stop: {finished.stop_reason}")
    return " · ".join(parts)


def start_line(target, spec_label: str, note: str = "") -> str:
    """What a generation runs on, before its reply: the model, its backend, device and dtype, the setting, and
    why it runs there when "auto" moved it for the method (engine.backends.resolve_backend's note)."""
    device = target.device_label or str(target.device)
    line = f"{target.label} on {target.backend} ({device}, {target.dtype_label}) · {spec_label}"
    return f"{line} · {note}" if note else line


class TerminalStream:
    def __init__(self, show_rejected: bool = True, console: Console | None = None) -> None:
        self.show_rejected = show_rejected
        self.out = console or Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False)

    def start(self, line: str) -> None:
        self.err.print(escape(line), style="dim", soft_wrap=True)

    def legend(self, started: GenerationStarted) -> None:
        for warning in started.warnings:  # one line each, however long (the terminal wraps it, not rich)
            self.err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        for note in started.notes:
            self.err.print(f"note: {escape(note)}", style="dim", soft_wrap=True)
        if started.method != plain_method().name:
            self._legend()

    def _legend(self) -> None:
        legend = Text("legend: ")
        for status in (TokenStatus.ACCEPTED, TokenStatus.SUBSTITUTED, TokenStatus.BONUS, TokenStatus.REJECTED):
            if status is not TokenStatus.REJECTED or self.show_rejected:
                legend.append(status.value, style=STYLES[status]).append("  ")
        self.err.print(legend)

    def round(self, event: RoundVerified) -> None:
        self.out.print(self._coloured(event), end="")
        sys.stdout.flush()

    def _coloured(self, event: RoundVerified) -> Text:
        text = Text()
        for token in fold_round(event):  # rejected ghosts come where they were proposed, before the correction
            if token.committed or self.show_rejected:  # a server's unnamed draft shows as ▯
                shown = token.text or ("▯" if token.status is TokenStatus.REJECTED and token.token_id < 0 else "")
                text.append(shown, style=STYLES[token.status])
        return text

    def revised(self, revised: RoundsRevised) -> None:
        """The reply's statuses learned at its end (a server's own steps): said, and on a terminal the reply again,
        coloured (piped, the text is not repeated)."""
        self.out.print()
        self.err.print(f"note: {escape(revised.note)}", style="dim", soft_wrap=True)
        if not self.out.is_terminal:
            return
        self._legend()
        text = Text()
        for event in revised.rounds:
            text.append_text(self._coloured(event))
        self.out.print(text, end="")

    def finish(self, finished: GenerationFinished | None) -> None:
        self.out.print()
        if finished is None:
            return
        if finished.error:
            self.err.print(f"[red]error:[/] {escape(finished.error)}")
        self.out.print(escape(stats_line(finished)))

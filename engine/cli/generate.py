"""`specscope generate`: one prompt answered, tokens coloured by how they were made (engine.cli.terminal), or
one JSON object per event. Touches the terminal and, through engine.runtime, the model files; never Qt."""

from __future__ import annotations

import json
import sys

from engine.cli.arguments import (add_compile_arg, add_consent_args, add_generation_args, add_model_args,
                                  add_sampling_args, add_spec_args, check_generation_args, sampling_from_args,
                                  spec_from_args)
from engine.cli.terminal import EXIT_BAD_INPUT, start_line, warn
from engine.core.errors import SpecScopeError
from engine.core.validation import decode_argument


def user_text(text: str | None, what: str) -> str | None:
    """Text typed on the command line as valid Unicode: bytes that aren't UTF-8 become U+FFFD, with a warning."""
    if text is None:
        return None
    decoded, replaced = decode_argument(text)
    if replaced:
        warn(f"{what} had bytes that are not UTF-8 text; they were replaced by \ufffd")
    return decoded


def cmd_generate(args) -> int:
    from engine.models.consent import require
    from engine.core.events import GenerationFinished, event_to_dict
    args.prompt, args.system = user_text(args.prompt, "the prompt"), user_text(args.system, "--system")
    args.stop = [user_text(stop, "--stop") for stop in args.stop or ()]
    if not args.prompt.strip():
        raise SpecScopeError("the prompt is empty: give the text to answer")
    spec, sampling = spec_from_args(args), sampling_from_args(args)
    check_generation_args(args)
    for note in spec.warnings:
        warn(note)
    require((args.model, spec.draft), trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle)
    from engine.runtime import load_engine, terminal_progress
    shown = terminal_progress(quiet=args.json)  # --json: only the notes on options left unused (--compile)
    heard: list[str] = []  # what the loader said, to say on the start line what was not shown

    def progress(message: str) -> None:
        heard.append(message)
        shown(message)
    answers = consent_answers(args, (args.model, spec.draft))
    engine = load_engine(args.model, progress, device=args.device, dtype=args.dtype, backend=args.backend,
                         trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
                         method=spec.method, consent=lambda: answers, on_status=progress,
                         compile=args.compile)
    events = engine.generate(args.prompt, spec=spec, sampling=sampling, max_new_tokens=args.max_new_tokens,
                             system=args.system, stop_strings=tuple(args.stop or ()))
    if args.json:
        finished = None
        for event in events:
            print(json.dumps(event_to_dict(event)), flush=True)
            finished = event if isinstance(event, GenerationFinished) else finished
    else:
        note = _backend_note(args.model, engine.target, spec.method, args.backend)
        line = start_line(engine.target, spec.label(), "" if note in heard and sys.stderr.isatty() else note)
        finished = _print_coloured(events, line, show_rejected=not args.hide_rejected)
    # a server's reply that broke off (stream cut, server silent, a verifying request failed): the partial reply is
    # out, the status says so
    broke_off = finished is not None and finished.stop_reason == "server-error"
    return EXIT_BAD_INPUT if broke_off else 0


def _backend_note(name: str, target, method: str, requested: str | None) -> str:
    """Why the model `name` runs on its backend when "auto" chose it for the method (resolve_backend's note, as
    the loader said it); "" for a model on a server."""
    from engine.backends import is_local_backend, resolve_backend
    from engine.models.sources import resolve_source
    if not is_local_backend(target.backend):
        return ""
    return resolve_backend(resolve_source(name), method, requested).note


def _print_coloured(events, start: str, show_rejected: bool):
    from engine.core.events import GenerationFinished, GenerationStarted, RoundsRevised, RoundVerified
    from engine.cli.terminal import TerminalStream
    stream = TerminalStream(show_rejected=show_rejected)
    stream.start(start)
    finished = None
    for event in events:
        if isinstance(event, GenerationStarted):
            stream.legend(event)
        elif isinstance(event, RoundVerified):
            stream.round(event)
        elif isinstance(event, RoundsRevised):
            stream.revised(event)
        elif isinstance(event, GenerationFinished):
            finished = event
    stream.finish(finished)
    return finished


def consent_answers(args, names):
    """The safety answers the command line gave (engine.models.consent.ConsentAnswers.from_flags), for the drafts."""
    from engine.models.consent import ConsentAnswers
    return ConsentAnswers.from_flags(names, trust_remote_code=args.trust_remote_code,
                                     allow_pickle=args.allow_pickle)


def add_generate(sub) -> None:
    gen = sub.add_parser("generate", help="answer one prompt, tokens coloured by how they were made")
    add_model_args(gen)
    add_compile_arg(gen)
    add_spec_args(gen)
    add_sampling_args(gen)
    add_generation_args(gen)
    add_consent_args(gen)
    gen.add_argument("--stop", action="append", help="stop string (repeatable)")
    gen.add_argument("--hide-rejected", action="store_true", help="do not show rejected draft tokens")
    gen.add_argument("--json", action="store_true", help="one JSON object per event, one per line")
    gen.add_argument("prompt")

"""`specscope models list | check | download | prepare`: what is on this machine and what it needs, how a draft
drafts for a target (in its ids or through text), downloads from the Hugging Face Hub with progress, a GGUF
converted once for the transformers backend. Touches the terminal, the
model files and caches (engine.models.catalog, engine.models.hub) and the keyring (engine.models.secrets,
for --token-from-keyring); never Qt."""

from __future__ import annotations

import json
import os
import sys
import threading

from engine.cli.arguments import add_consent_args
from engine.cli.terminal import Parser, warn
from engine.core.errors import SpecScopeError
from engine.core.validation import MAX_COUNT, check_int, parse_int


def cmd_models(args) -> int:
    if args.models_command == "prepare":
        return _models_prepare(args)
    if args.models_command == "check":
        return _models_check(args)
    if args.models_command == "download":
        return _models_download(args)
    return _models_list(args)


def _models_prepare(args) -> int:
    """Load the model twice on the transformers backend (where `auto` would run a GGUF on llama.cpp as it is
    stored): the first load converts a GGUF once, the second shows what later starts cost."""
    from engine.models.consent import require
    from engine.models.load import load_model
    from engine.models.sources import resolve_source
    from engine.runtime import terminal_progress
    flags = {"trust_remote_code": args.trust_remote_code, "allow_pickle": args.allow_pickle}
    require((args.model,), **flags)
    is_gguf = resolve_source(args.model).gguf_file is not None
    first = load_model(args.model, device="cpu", progress=terminal_progress(), backend="transformers", **flags)
    again = load_model(args.model, device="cpu", backend="transformers", **flags)
    what = ("converted and loaded" if first.converted_now else "loaded (already converted)") if is_gguf \
        else "loaded (not a GGUF: nothing to convert)"
    print(f"{first.label}: {what} on transformers in {first.load_seconds:.1f} s; next load "
          f"{again.load_seconds:.2f} s ({first.source.path})")
    return 0


def _models_list(args) -> int:
    from rich.markup import escape

    from engine.models import catalog
    from engine.models.memory import estimate_memory
    if args.context is not None:
        check_int("--context", args.context, 1, MAX_COUNT * 10)
    entries = catalog.list_models(args.path or ())
    estimates = []
    for entry in entries:
        try:
            estimates.append(estimate_memory(entry, args.device, args.dtype, args.context)
                             if entry.usable else None)
        except SpecScopeError:
            estimates.append(None)
    if args.json:
        print(json.dumps([catalog.entry_as_dict(e) | ({"memory": m.as_dict()} if m else {})
                          for e, m in zip(entries, estimates)]))
        return 0
    from rich.console import Console
    from rich.table import Table
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    where = next((m for m in estimates if m is not None), None)
    memory_title = f"memory ({where.device}, {where.dtype}, {where.context_tokens:,} tok)" if where else "memory"
    table = Table(box=None, pad_edge=False)
    for column in ("name", "kind", "architecture", "parameters", "size", "vocab", "dtype", memory_title):
        table.add_column(column, overflow="fold")
    for entry, estimate in zip(entries, estimates):
        if estimate is None:
            memory = f"[red]{escape(entry.problem)}[/]" if entry.problem else "?"
        else:
            memory = catalog.format_bytes(estimate.total_bytes)
            if estimate.fits is False:
                memory += f" [red](only {catalog.format_bytes(estimate.free_bytes)} free)[/]"
        name = escape(entry.label if entry.name in ("default", entry.repo_id) else entry.name)
        own = catalog.own_drafter(entry)
        if own is not None:  # a model with its own drafter (MTP layers, a Gemma 4 assistant) says so
            name += f"\n[green]{escape(own[1])}[/]"
        table.add_row(name, entry.kind, escape(entry.architecture or "?"),
                      catalog.format_parameters(entry.n_parameters),
                      catalog.format_bytes(entry.size_bytes), f"{entry.vocab_size:,}" if entry.vocab_size else "?",
                      escape(entry.dtype or "?"), memory)
    console.print(table)
    return 0


def _models_check(args) -> int:
    from engine.models import catalog
    from engine.core.compat import CROSS_TOKENIZER_WORDS, tokenizer_difference
    from engine.drafters.cross_tokenizer import shared_vocabulary_words
    from engine.models.consent import require
    from engine.models.load import load_tokenizer_only
    require((args.target, args.draft), trust_remote_code=args.trust_remote_code, allow_pickle=True)
    target = load_tokenizer_only(args.target, trust_remote_code=args.trust_remote_code)
    draft = load_tokenizer_only(args.draft, trust_remote_code=args.trust_remote_code)
    difference = tokenizer_difference(target, draft)
    if difference:  # the draft-model method drafts through text
        print(f"{CROSS_TOKENIZER_WORDS}: {args.draft} can draft for {args.target} (first difference: {difference})")
        print(shared_vocabulary_words(target, draft))
    else:
        print(f"compatible: {args.draft} can draft for {args.target}")
    try:
        target_entry, draft_entry = catalog.describe_name(args.target), catalog.describe_name(args.draft)
        if target_entry.n_parameters and draft_entry.n_parameters \
                and draft_entry.n_parameters >= target_entry.n_parameters:
            warn(f"{args.draft} is not smaller than {args.target}, so drafting with it will not be faster")
    except SpecScopeError:
        pass
    return 0


def _download_token(args) -> str | None:
    """The token for a download: the one the app saved (--token-from-keyring), else HF_TOKEN, else none."""
    if not args.token_from_keyring:
        return os.environ.get("HF_TOKEN") or None
    from engine.models import secrets
    token = secrets.default_store().get()
    if not token:
        raise SpecScopeError("no Hugging Face token is saved in the keyring; add one in the app's settings first")
    return token


def _download_with_progress(plan, token: str | None):
    """hub.download on a thread with a progress bar on stderr (a terminal only); Ctrl-C stops it at the next
    chunk, keeping what finished. Returns the result or raises what the download raised."""
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                               TransferSpeedColumn)
    from engine.models import hub
    cancel, outcome = threading.Event(), {}
    progress_bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                            TransferSpeedColumn(), TimeRemainingColumn(), transient=False,
                            disable=not sys.stderr.isatty(), console=Console(stderr=True))
    task = progress_bar.add_task(plan.repo_id, total=plan.total_bytes or None)

    def on_progress(p) -> None:
        progress_bar.update(task, completed=p.bytes_done, total=p.bytes_total or None,
                            description=f"{plan.repo_id} ({p.files_done}/{p.files_total} files)")

    def work() -> None:
        try:
            outcome["result"] = hub.download(plan.repo_id, token=token, plan=plan, progress=on_progress,
                                             cancel=cancel)
        except BaseException as exc:  # handed to the main thread, which reports it
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="download", daemon=True)
    with progress_bar:
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.1)
        except KeyboardInterrupt:  # Ctrl-C: stop at the next chunk, keep what finished
            cancel.set()
            worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _models_download(args) -> int:
    from engine.models import hub
    from engine.models.catalog import format_bytes
    from engine.core.errors import DownloadCancelledError
    token = _download_token(args)
    endpoint = hub.resolve_endpoint()  # https only (http for this computer); the token goes nowhere else
    if sys.stderr.isatty():
        print(f"{args.repo_id} from {endpoint}", file=sys.stderr)
    plan = hub.plan_download(args.repo_id, revision=args.revision, token=token, files=args.file or None,
                             allow_pickle=args.allow_pickle)
    try:
        result = _download_with_progress(plan, token)
    except DownloadCancelledError as exc:
        print(f"specscope: {exc}", file=sys.stderr)
        return 130
    if plan.skipped:
        print(f"skipped {len(plan.skipped)} file(s) SpecScope does not need: {', '.join(plan.skipped[:5])}"
              f"{', …' if len(plan.skipped) > 5 else ''}", file=sys.stderr)
    if result.needs_remote_code:
        warn(f"{plan.repo_id} ships its own Python code (auto_map in its config); SpecScope does not run it, so "
             "it may not load")
    print(f"{plan.repo_id}: {len(result.files)} files, {format_bytes(plan.total_bytes)} "
          f"({format_bytes(result.bytes_downloaded)} downloaded now from {endpoint}) in {result.folder}")
    print(f"use it with --model {result.name}")
    return 0


def add_models(sub) -> None:
    models = sub.add_parser("models", help="list, check and download models")
    msub = models.add_subparsers(dest="models_command", required=True, parser_class=Parser)
    mlist = msub.add_parser("list", help="the built-in model, the local Hugging Face cache and --path models, "
                                         "with their facts and memory needs")
    mlist.add_argument("--json", action="store_true")
    mlist.add_argument("--path", action="append", help="also describe this model folder or .gguf (repeatable)")
    mlist.add_argument("--device", default="auto", help="device for the memory estimate (auto, cpu, cuda, mps)")
    mlist.add_argument("--dtype", default=None, help="dtype for the memory estimate (default: the device's)")
    mlist.add_argument("--context", type=parse_int, default=None, help="tokens of KV cache in the estimate (4096)")
    mcheck = msub.add_parser("check", help="say how DRAFT drafts for TARGET: in its ids (the same tokenizer) or "
                                           "through text (another one); exit 2 where a tokenizer can't be read")
    mcheck.add_argument("target")
    mcheck.add_argument("draft")
    mcheck.add_argument("--trust-remote-code", action="store_true",
                        help="run the tokenizers' own Python code (auto_map): only for models you trust")
    mdown = msub.add_parser("download", help="download a model from the Hugging Face Hub into its cache "
                                             "(Ctrl-C cancels; running it again continues)")
    mdown.add_argument("repo_id", help="e.g. Qwen/Qwen3-0.6B")
    mdown.add_argument("--token-from-keyring", action="store_true",
                       help="use the Hugging Face token saved by the app (else HF_TOKEN, if set)")
    mdown.add_argument("--file", action="append", help="only this file or glob, e.g. '*Q4_K_M.gguf' (repeatable)")
    mdown.add_argument("--revision", default=None, help="branch, tag or commit (default main)")
    mdown.add_argument("--allow-pickle", action="store_true",
                       help="accept pickle checkpoints (.bin/.pt) when a repo has no safetensors: they can run code")
    mprep = msub.add_parser("prepare", help="convert a GGUF once for --backend transformers, then report the "
                                            "first and the next load times")
    mprep.add_argument("model", nargs="?", default="default")
    add_consent_args(mprep)

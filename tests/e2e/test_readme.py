"""README.md is true and complete, checked against the code it describes: every `specscope …` command in it parses
with the real parsers (test_printed_commands.py runs those that can run here); every option of every command,
every SPECSCOPE_* variable engine/, gui/ and packaging/ read, and every module of engine/ and gui/ is in it; the
paths it names exist; its llama.cpp methods are the method registry's; its figures are the code's constants.
(Its shortcuts against the menus': tests/gui/views/main/test_gui_readme_shortcuts.py.) No model is loaded; Qt only where
the window's own checks of its options import it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.e2e.readme_kit import (ROOT, ParseFailed, block_commands, command_help, every_parser, hub_ids,
                                  inline_commands, mentions, option_strings, parse_command, readme_text, section,
                                  subparsers, words)

# README's placeholders, filled so that the line parses as a user's would
FILLERS = {"TEXT": "hi", "SPEC": "prompt-lookup:k=5", "M": "prompt-lookup", "K": "4", "N": "1", "TARGET": "default",
           "DRAFT": "default", "MODEL": "default", "DIR": "head", "PATH": "default", "OUT": "out.json"}


def filled(line: str, tmp_path: Path) -> str:
    """`line` with README's synopsis marks resolved: `[…]` kept without brackets, a lone `…` dropped, `SPEC…`
    read as SPEC, placeholders filled, outputs (PNG, --json OUT) under `tmp_path`."""
    out = []
    for word in line.replace("[", " ").replace("]", " ").split():
        word = word.rstrip("…") if word != "…" and word.endswith("…") and word[:-1].isupper() else word
        if word == "…":
            continue
        if word == "PNG":
            word = str(tmp_path / "shot.png")
        out.append(FILLERS.get(word, word))
    return " ".join(out)


def alternatives(line: str) -> list[str]:
    """`specscope a | b | c` → each command; any other line as it is."""
    argv = line.split()
    if "|" not in argv:
        return [line]
    return ["specscope " + part.strip() for part in " ".join(argv[1:]).split("|")]


# ---------------------------------------------------------------- commands


def test_the_readme_commands_are_found():
    lines = block_commands()
    assert len(lines) >= 15 and all(line.startswith("specscope") for line in lines)
    hf = [line for line in lines if "--compare-hf" in line]
    assert any("mtp:k=1" in line for line in hf) and any("assistant:" in line for line in hf), hf
    spans = inline_commands()
    assert any(span.startswith("specscope gui --compare SPEC") for span in spans), spans
    assert block_commands("text\n\n    specscope models list\n\nmore\n") == ["specscope models list"]  # indented too
    assert inline_commands("see `specscope gui --prompt TEXT\n  --quit-when-done` and ```a```") == \
        ["specscope gui --prompt TEXT --quit-when-done"]


@pytest.mark.parametrize("line", block_commands(), ids=lambda line: " ".join(words(line))[:70])
def test_a_readme_command_parses(line, tmp_path, monkeypatch):
    """A shell-block command, as written (placeholders filled): through gui.launch's parser and the command's own
    checks of its settings (SPECs, sampling), short of loading a model."""
    monkeypatch.chdir(tmp_path)
    try:
        parse_command(filled(line, tmp_path))
    except ParseFailed as exc:
        pytest.fail(f"{line}\n  → {exc}")


@pytest.mark.parametrize("span", inline_commands(), ids=lambda line: line[:70])
def test_a_readme_inline_command_names_real_commands_and_options(span, tmp_path, monkeypatch):
    """An inline `specscope …` names a command that exists and only that command's options (exactly: no
    abbreviation); where it is a whole command line it parses. A reference to a command that leaves out an
    argument the command requires (`specscope bench --compare-llama`) is only a name."""
    monkeypatch.chdir(tmp_path)
    parsers = every_parser()
    for line in alternatives(filled(span, tmp_path)):
        argv = words(line)
        path = ("gui",) if argv[:1] == ["gui"] or not argv or argv[0].startswith("-") else ()
        for word in argv[len(path):]:
            if path + (word,) in parsers:
                path += (word,)
            elif not path and word not in ("--help", "--version"):
                pytest.fail(f"{span}: {word!r} is not a specscope command")
        known = set(option_strings(parsers[path])) | {"--help", "--version"}
        unknown = [word.split("=")[0] for word in argv if word.startswith("--") and word.split("=")[0] not in known]
        assert not unknown, f"{span}: `specscope {' '.join(path)}` has no option {unknown}"
        try:
            parse_command(line)
        except ParseFailed as exc:
            assert "the following arguments are required" in str(exc) or \
                (subparsers(parsers[path]) and "invalid choice" not in str(exc)), f"{span}\n  → {exc}"


@pytest.mark.parametrize("line, why", [
    ("specscope bench --model default --config none --config mtp:k=1 --compare-hf", "--prompts"),
    ("specscope generate --mehtod prompt-lookup hi", "--mehtod"),
    ("specscope generate --method prompt-lookup --k 0 hi", "k"),
    ("specscope bench --prompts p.jsonl --config nonsense:k=2", "nonsense"),
    ("specscope gui --colour-by colour", "colour"),
    ("specscope models check default", "draft"),
    ("specscope bench-gui --repeatz 2", "--repeatz"),
])
def test_the_parse_check_refuses_what_the_commands_refuse(line, why):
    with pytest.raises(ParseFailed, match=re.escape(why)):
        parse_command(line)


def test_commands_that_name_a_hub_model_are_the_ones_not_run():
    """test_printed_commands runs every engine command in a shell block but those naming a hub id (they would
    download): here, the MTP and assistant checks against transformers' own generation."""
    argv = words("specscope bench --model google/gemma-4-E2B-it --prompts assets/presets.json "
                 "--config assistant:k=4,draft=google/gemma-4-E2B-it-assistant")
    assert hub_ids(argv) == ["google/gemma-4-E2B-it", "google/gemma-4-E2B-it-assistant"]
    assert hub_ids(words("specscope bench --model default --prompts assets/presets.json --config prompt-lookup")) == []
    assert hub_ids(words("specscope generate --draft ../x/head hi")) == []
    networked = [line for line in block_commands() if hub_ids(words(line))]
    assert networked and all(line.startswith("specscope bench") for line in networked), networked


def test_models_check_and_prepare_say_in_readme_what_their_help_says():
    """The Command line block's comment on `models check` and `models prepare` is the subcommand's own --help."""
    lines = {" ".join(words(line)[:2]): line for line in block_commands() if words(line)[:1] == ["models"]}
    for name in ("check", "prepare"):
        comment = " ".join(lines[f"models {name}"].split("#", 1)[1].split())
        help_text = " ".join(command_help(every_parser()[("models",)], name).split())
        assert comment == help_text, (comment, help_text)


# ---------------------------------------------------------------- what is documented


def test_every_option_of_every_command_is_in_the_readme():
    parsers = every_parser()
    missing = [f"specscope {' '.join(path)} {option}" for path, parser in parsers.items()
               for option in option_strings(parser) if not mentions(option)]
    assert ("generate",) in parsers and ("drafter", "train") in parsers and ("bench-gui",) in parsers
    assert not missing, "README.md does not mention: " + ", ".join(missing)


def _environment_variables() -> set[str]:
    found = set()
    for folder in ("engine", "gui", "packaging"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".sh", ".spec", ".desktop", ""):
                found |= set(re.findall(r"\bSPECSCOPE_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(errors="replace")))
    return found


def test_every_specscope_variable_read_is_in_the_readme():
    variables = _environment_variables()
    assert {"SPECSCOPE_DATA_DIR", "SPECSCOPE_TORCH", "SPECSCOPE_BUNDLE_TRIM"} <= variables  # py, sh and .spec read
    missing = sorted(name for name in variables if not mentions(name))
    assert not missing, f"README.md does not mention: {', '.join(missing)}"


def layout_modules(block: str) -> set[str]:
    """The `folder/name.py` paths README's Layout tree lists: a line whose first word ends in `/` opens that folder
    (inside the folder opened less indented above it) and lists its modules; the `name.py` words of any other line
    belong to the innermost folder opened at a smaller indent than the line's."""
    listed, open_folders = set(), []  # (indent, path)
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while open_folders and open_folders[-1][0] >= indent:
            open_folders.pop()
        first = line.split()[0]
        parent = open_folders[-1][1] if open_folders else ""
        if first.endswith("/"):
            parent += first
            open_folders.append((indent, parent))
        for word in re.findall(r"(?<![\w/.])([A-Za-z_]\w*\.py)\b", line):
            listed.add(parent + word)
    return listed


def test_the_layout_lists_every_module_of_engine_and_gui_and_no_other():
    block = re.search(r"^```\n(.*?)^```", section("Layout"), re.S | re.M).group(1)
    listed = {path for path in layout_modules(block) if path.startswith(("engine/", "gui/"))}
    actual = {path.relative_to(ROOT).as_posix() for folder in ("engine", "gui")
              for path in (ROOT / folder).rglob("*.py") if not path.name.startswith("__")}
    assert "engine/core/verify.py" in listed and "gui/views/main/menus.py" in listed
    assert not actual - listed, f"Layout misses: {', '.join(sorted(actual - listed))}"
    assert not listed - actual, f"Layout lists modules that are not there: {', '.join(sorted(listed - actual))}"
    assert layout_modules("a/\n  b.py\n  c/    d.py\n    e.py f.py\n  g.py\n") == \
        {"a/b.py", "a/c/d.py", "a/c/e.py", "a/c/f.py", "a/g.py"}


def test_the_paths_the_readme_names_exist():
    """Every `path` README names in code (a module, a test, a script, `file.py::test`) is in the checkout; a
    placeholder in capitals (`engine/drafters/NAME.py`) stands for any name."""
    text = readme_text()
    spans = re.findall(r"`((?:engine|gui|tests|packaging|assets|benchmarks|\.ci)/[\w./-]+(?:::\w+)?)`", text)
    assert "tests/e2e/test_remote_server.py" in spans
    missing = []
    for span in spans:
        path, _, test = span.partition("::")
        if re.search(r"\b[A-Z]{2,}\b", path):
            if not list(ROOT.glob(re.sub(r"\b[A-Z]{2,}\b", "*", path))):
                missing.append(span)
        elif not (ROOT / path).exists():
            missing.append(span)
        elif test and not any(isinstance(node, ast.FunctionDef) and node.name == test
                              for node in ast.walk(ast.parse((ROOT / path).read_text()))):
            missing.append(span)
    assert not missing, f"README.md names what is not there: {', '.join(missing)}"


# ---------------------------------------------------------------- what the text claims


def _methods_in(text: str, names: set[str]) -> set[str]:
    return {word for word in re.findall(r"`([\w+-]+)`", text) if word in names}


def test_the_llama_cpp_methods_are_the_registrys():
    """The llama.cpp section's "Methods:" bullet names every method whose MethodSpec.backends has llama.cpp, and
    after "transformers backend only" exactly those without it (combinations aside: they serve what both parts do)."""
    import engine.drafters  # noqa: F401  (registers the methods)
    from engine.core.methods import methods
    singles = {m.name: m for m in methods() if not m.parts}
    bullet = re.search(r"^- Methods\b(.*?)(?=^- |\Z)", section("The llama.cpp backend"), re.S | re.M).group(1)
    served, _, refused = bullet.partition("transformers backend only")
    assert refused, "the bullet says which methods are transformers only"
    assert _methods_in(served, set(singles)) == {n for n, m in singles.items() if "llama.cpp" in m.backends}
    assert _methods_in(refused, set(singles)) == {n for n, m in singles.items() if "llama.cpp" not in m.backends}


def test_the_readme_context_is_the_llama_cpp_loaders():
    """"at most N tokens" is engine.backends.llama_cpp.MAX_DEFAULT_CONTEXT (read from the source: no llama.cpp
    import), and the text says how a longer one is asked for."""
    source = (ROOT / "engine/backends/llama_cpp.py").read_text()
    limit = int(re.search(r"^MAX_DEFAULT_CONTEXT = (\d+)", source, re.M).group(1))
    bullet = re.search(r"^- Context:(.*?)(?=^- |\Z)", section("The llama.cpp backend"), re.S | re.M).group(1)
    assert f"at most {limit} tokens" in " ".join(bullet.split())
    assert "n_ctx" in bullet and "def load(" in source and "n_ctx: int | None" in source


def test_the_parameter_table_is_the_registrys():
    """Methods' table of parameters: one row per ParamSpec of every method (combinations aside), with its option,
    SPEC key and default as the MethodSpec declares them."""
    import engine.drafters  # noqa: F401  (registers the methods)
    from engine.core.methods import methods
    declared = {(m.name, p.cli_flag, p.name, "auto" if p.default is None else "off" if p.default is False
                 else str(p.default)) for m in methods() if not m.parts for p in m.params}
    table = re.search(r"^\| method \| option \| SPEC key \| default \|.*?\n\|[- |]+\n((?:\|.*\n)+)", section("Methods"),
                      re.M).group(1)
    rows = {tuple(cell.strip().strip("`") for cell in row.strip("|").split("|")[:4]) for row in table.splitlines()}
    assert len(declared) >= 10
    assert rows == declared, (f"README has {sorted(rows - declared)}; the registry {sorted(declared - rows)}")

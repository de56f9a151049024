"""The prepared GPU check (packaging/gpu_check.sh): on one device with no network, within a time budget, it
measures what the engine does there and writes a JSON report (--out, default gpu_check.json):

  device       the device, its name, compute capability, native bf16 (engine.backends.device), free memory
  equality     greedy output of none / prompt-lookup / draft-model / early-exit / eagle against plain decoding, in
               float32 and bf16, on random-weight models built here (shapes "tiny", "135M" = SmolLM2-135M's config,
               "1.5B" = Qwen2.5-1.5B-like; the built-in model's tokenizer); a difference is diagnosed
               (engine.measure.divergence): a near-tie passes, a mismatch fails
  verify_cost  the cost of verifying n tokens against one (engine.measure.verify_cost), per shape
  throughput   plain and speculative tok/s, eager against --compile where the loader offers it
  train        a short `drafter train` (engine.training.train) on the device
  llama_cuda   only with a CUDA toolkit (nvcc): llama.cpp built for CUDA from the local sdist, its verify cost

Each section runs in a child process of its own (this script with --only SECTION), under its own time budget,
and writes what it has after every step, so a section that fails, hangs or times out is recorded and the
others still run. The exit status is 1 only when the equality section fails (a real mismatch, or it could not
run) or the script itself breaks; a skipped or timed-out measurement is recorded, not failed.
Needs only what packaging/install.sh installs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("device", "equality", "verify_cost", "throughput", "train", "llama_cuda")
CORRECTNESS = ("equality",)
# seconds per section on a GPU, on the CPU (--device cpu: the tiny and 135M shapes only)
BUDGETS = {"device": (45, 45), "equality": (150, 90), "verify_cost": (40, 25), "throughput": (110, 40),
           "train": (80, 35), "llama_cuda": (400, 0)}
TOTAL_BUDGET = {"gpu": 480, "cpu": 180}
METHODS = ("none", "prompt-lookup", "draft-model", "early-exit", "eagle")
PROMPT = ("Speculative decoding drafts a few tokens and verifies them in one pass of the target model. "
          "Speculative decoding drafts a few tokens and verifies them")
LLAMA_VERSION = "0.3.36"


# ------------------------------------------------------------------ the models it builds

def shape_config(shape: str, tokenizer):
    """A transformers config of `shape` on the built-in model's vocabulary."""
    from transformers import LlamaConfig, Qwen2Config
    common = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.eos_token_id)
    if shape == "tiny":
        return LlamaConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=128, max_position_embeddings=1024, tie_word_embeddings=False, **common)
    if shape == "135M":  # SmolLM2-135M
        return LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                           intermediate_size=1536, max_position_embeddings=8192, rope_theta=100000.0,
                           rms_norm_eps=1e-5, tie_word_embeddings=True, **common)
    if shape == "1.5B":  # Qwen2.5-1.5B's layers (its own vocabulary is 151 936)
        return Qwen2Config(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                           intermediate_size=8960, max_position_embeddings=32768, rope_theta=1000000.0,
                           rms_norm_eps=1e-6, tie_word_embeddings=True, **common)
    raise ValueError(f"unknown shape {shape!r}")


def builtin_tokenizer(work: Path):
    """The built-in model's tokenizer, saved once in the work folder (converted from its GGUF, offline)."""
    from transformers import AutoTokenizer
    from engine.backends.source import converted_folder
    from engine.models.sources import resolve_source
    folder = work / "tokenizer"
    if not (folder / "tokenizer_config.json").exists():
        converted = converted_folder(resolve_source("default").file)  # `specscope models prepare` made it
        if (converted / "tokenizer.json").exists():
            AutoTokenizer.from_pretrained(converted).save_pretrained(folder)
        else:
            from engine.models.load import load_tokenizer_only
            load_tokenizer_only("default").save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def built_model(work: Path, shape: str, noise: float = 0.0) -> Path:
    """A random-weight model of `shape` (fixed seed) saved in bf16 with the tokenizer, and an EAGLE head for it
    (random, saved in our format) beside it; built once per work folder."""
    import torch
    from transformers import AutoModelForCausalLM
    folder = work / (shape + ("-noisy" if noise else ""))
    if (folder / "eagle-head" / "head.json").exists():
        return folder
    tokenizer = builtin_tokenizer(work)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(shape_config(shape, tokenizer), dtype=torch.float32).eval()
    if shape == "tiny":  # a random tiny model's logits are nearly flat: sharper ones make outputs less tied
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(20.0)
    if noise:
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn(parameter.shape, generator=generator) * noise)
    model = model.to(torch.bfloat16)  # fp32 and bf16 loads then hold the same values
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_random_head(folder / "eagle-head", model, shape)
    return folder


def save_random_head(folder: Path, model, shape: str) -> None:
    import torch
    from engine.drafters.eagle_head import EagleHead, HeadCard, save_head, target_fingerprint
    vocab = model.config.vocab_size
    torch.manual_seed(1)
    head = EagleHead(model, torch.arange(min(vocab, 8192))).float()
    card = HeadCard(shape, target_fingerprint(model), int(model.config.hidden_size), min(vocab, 8192),
                    {"note": "random weights (gpu_check)"})
    save_head(folder, head, card)


def shapes_for(device: str) -> tuple[str, ...]:
    return ("tiny", "135M") if device == "cpu" else ("tiny", "135M", "1.5B")


# ------------------------------------------------------------------ sections (each in a child process)

def section_device(ctx) -> dict:
    import torch
    from engine import host
    from engine.backends.device import cuda_native_bf16, resolve_device
    device = resolve_device(ctx.device)
    out = {"device": str(device), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "free_bytes": host.free_memory(str(device)),
           "nvcc": shutil.which("nvcc"), "cpu_threads": torch.get_num_threads()}
    if device.type == "cuda":
        index = device.index or 0
        _free, total = torch.cuda.mem_get_info(index)
        out.update(name=torch.cuda.get_device_name(index), capability=list(torch.cuda.get_device_capability(index)),
                   native_bf16=cuda_native_bf16(index), total_bytes=int(total))
    else:
        out.update(name=platform.processor() or platform.machine(), native_bf16=host.native_bf16())
    try:
        from engine.backends.llama_cpp import accelerators
        out["llama_cpp_accelerators"] = accelerators()
    except Exception as exc:  # llama-cpp-python missing or broken: a fact, not a failure here
        out["llama_cpp_accelerators"] = f"unavailable: {exc}"
    return out


def section_equality(ctx) -> dict:
    from engine.core.config import SpecConfig
    from engine.measure.divergence import diagnose
    from engine.models.load import load_model
    from engine.runtime import local_engine
    rows, out = [], {"rows": []}
    draft = built_model(ctx.work, "tiny", noise=0.002)
    for shape in shapes_for(ctx.device):
        folder = built_model(ctx.work, shape)
        n_layers = {"tiny": 4, "135M": 30, "1.5B": 28}[shape]
        specs = {"none": SpecConfig(), "prompt-lookup": SpecConfig("prompt-lookup", k=4),
                 "draft-model": SpecConfig("draft-model", k=4, draft=str(draft)),
                 "early-exit": SpecConfig("early-exit", k=3, params={"layers": n_layers // 2}),
                 "eagle": SpecConfig("eagle", k=3, draft=str(folder / "eagle-head"))}
        tokens = 48 if ctx.device != "cpu" else (32 if shape == "tiny" else 16)
        # a CPU without native bf16 emulates it (several times slower): the 135M shape in float32 only there
        dtypes = ("float32", "bf16") if ctx.device != "cpu" or shape == "tiny" else ("float32",)
        for dtype in dtypes:
            target = load_model(str(folder), device=ctx.device, dtype=dtype, backend="transformers")
            prompt = target.tokenizer.encode(PROMPT)
            plain = list(local_engine(target).generate_ids(prompt, max_new_tokens=tokens))[-1]
            for method in METHODS:
                row = {"shape": shape, "dtype": dtype, "method": method, "tokens": tokens}
                started = ctx.clock()
                try:
                    events = list(local_engine(target).generate_ids(prompt, spec=specs[method], max_new_tokens=tokens))
                    rounds, finished = events[1:-1], events[-1]
                    divergence = diagnose(target, prompt, plain.output_ids, finished.output_ids, rounds)
                    row.update(result="identical" if divergence is None else divergence.kind,
                               acceptance=finished.stats.acceptance_rate, tok_per_s=finished.stats.tok_per_s)
                    if divergence is not None:
                        row.update(divergence=divergence.as_dict(), explanation=divergence.explanation())
                except Exception as exc:
                    row.update(result="error", error=f"{type(exc).__name__}: {exc}")
                row["seconds"] = ctx.clock() - started
                rows.append(row)
                out["rows"] = rows
                ctx.save(out)
            del target
    counts = {kind: sum(r["result"] == kind for r in rows) for kind in ("identical", "near-tie", "mismatch", "error")}
    out.update(counts)
    out["status"] = "fail" if counts["mismatch"] or counts["error"] else "ok"
    return out


def section_verify_cost(ctx) -> dict:
    from engine.measure.verify_cost import measure
    from engine.models.load import load_model
    curves, out = {}, {}
    n_max = 16 if ctx.device != "cpu" else 8
    for shape in shapes_for(ctx.device)[1:] if ctx.device != "cpu" else shapes_for("cpu"):
        target = load_model(str(built_model(ctx.work, shape)), device=ctx.device, backend="transformers")
        runner = target.new_runner()
        try:
            cost = measure(runner, target.vocab_size, n_max, repeats=3)
        finally:
            runner.release()
        curves[f"{shape} {target.dtype_label}"] = {
            "seconds": list(cost.seconds), "relative": [round(cost.relative(n), 3) for n in range(1, n_max + 1)]}
        out["curves"] = curves
        ctx.save(out)
    return out


def section_throughput(ctx) -> dict:
    import inspect
    from engine.core.config import SpecConfig
    from engine.runtime import load_engine
    shape = "tiny" if ctx.device == "cpu" else "135M"
    folder, draft = built_model(ctx.work, shape), built_model(ctx.work, "tiny", noise=0.002)
    has_compile = "compile" in inspect.signature(load_engine).parameters
    out = {"shape": shape, "compile": "available" if has_compile else "not available", "runs": {}}
    if ctx.device == "cpu" and has_compile:
        # inductor compiles each pass width for about a minute on a 2-core CPU: more than this check's budget
        has_compile = False
        out["compile"] = "not measured on the CPU (each width compiles for ~1 min); measured with --device cuda"
    tokens = 64 if ctx.device == "cpu" else 128
    specs = {"none": SpecConfig(), "prompt-lookup": SpecConfig("prompt-lookup", k=4),
             "draft-model": SpecConfig("draft-model", k=4, draft=str(draft))}
    for mode in ("eager", "compile") if has_compile else ("eager",):
        options = {"compile": True} if mode == "compile" else {}
        started = ctx.clock()
        engine = load_engine(str(folder), device=ctx.device, backend="transformers", **options)
        prompt = engine.target.tokenizer.encode(PROMPT)
        for label, spec in specs.items():
            list(engine.generate_ids(prompt, spec=spec, max_new_tokens=8))  # warm-up (compiles, loads the draft)
            finished = list(engine.generate_ids(prompt, spec=spec, max_new_tokens=tokens))[-1]
            out["runs"][f"{mode} {label}"] = round(finished.stats.tok_per_s, 1)
            ctx.save(out)
        out[f"{mode}_seconds"] = ctx.clock() - started
        engine.release()
    return out


def section_train(ctx) -> dict:
    from engine.training.train import TrainOptions, train
    shape = "tiny" if ctx.device == "cpu" else "135M"
    folder = built_model(ctx.work, shape)
    minutes = 1.0 if ctx.device != "cpu" else 20 / 60
    lines: list[str] = []
    options = TrainOptions(model=str(folder), out=ctx.work / f"trained-{shape}", minutes=minutes, device=ctx.device,
                           held_out_prompts=2, max_new_tokens=48 if ctx.device == "cpu" else 96,
                           window=64 if ctx.device == "cpu" else 256, batch=4 if ctx.device == "cpu" else 6)
    last = {}

    def report(progress) -> None:
        lines.append(f"{progress.phase} {progress.fraction:.0%} {progress.message}")
        last.update(phase=progress.phase, step=progress.step, loss=progress.loss,
                    acceptance=list(progress.acceptance))
        ctx.save({"shape": shape, "minutes": minutes, **last, "log": lines[-12:]})

    out_dir, card = train(options, report)
    return {"shape": shape, "minutes": minutes, **last, "head": str(out_dir),
            "head_written": (Path(out_dir) / "head.json").exists(), "log": lines[-12:]}


def local_sdist(work: Path) -> Path | None:
    """llama-cpp-python's sdist from this machine only: SPECSCOPE_LLAMA_SDIST, the tools folder, the current
    folder, or pip's own cache (pip download with no index reachable)."""
    name = f"llama_cpp_python-{LLAMA_VERSION}.tar.gz"
    tools = Path(os.environ.get("SPECSCOPE_TOOLS_DIR", Path.home() / ".cache" / "specscope-tools"))
    for candidate in [os.environ.get("SPECSCOPE_LLAMA_SDIST", ""), str(tools / name), name]:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    found = glob.glob(str(tools / "**" / name), recursive=True)
    if found:
        return Path(found[0])
    target = work / "sdist"
    result = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                             "--timeout", "5", "--retries", "0", f"llama-cpp-python=={LLAMA_VERSION}", "-d",
                             str(target)], capture_output=True, text=True, timeout=60)
    return (target / name) if result.returncode == 0 and (target / name).is_file() else None


def section_llama_cuda(ctx) -> dict:
    if shutil.which("nvcc") is None:
        return {"status": "skipped", "reason": "no CUDA toolkit (nvcc)"}
    import importlib.util
    if importlib.util.find_spec("scikit_build_core") is None:  # its build backend: offline, pip can't fetch it
        return {"status": "skipped", "reason": "scikit-build-core is not installed (an offline build needs it)"}
    try:
        sdist = local_sdist(ctx.work)
    except subprocess.TimeoutExpired:
        sdist = None
    if sdist is None:
        return {"status": "skipped", "reason": "no sdist"}
    site = ctx.work / "llama-cuda"
    env = dict(os.environ, CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    started = ctx.clock()
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir", "--no-index",
                            "--no-build-isolation", "--target", str(site), str(sdist)], env=env,
                           capture_output=True, text=True)
    out = {"sdist": str(sdist), "build_seconds": ctx.clock() - started}
    if build.returncode != 0:
        return {**out, "status": "error", "error": "build failed: " + (build.stderr or build.stdout)[-2000:]}
    ctx.save(out)
    probe = ("import json, sys; from engine.backends.llama_cpp import accelerators; "
             "from engine.models.load import load_model; from engine.measure.verify_cost import measure; "
             "m = load_model('default', device='cuda', backend='llama.cpp'); r = m.new_runner(); "
             "c = measure(r, m.vocab_size, 16, repeats=3); r.release(); "
             "print(json.dumps({'accelerators': accelerators(), 'device': m.device_label, "
             "'seconds': list(c.seconds), 'relative': [c.relative(n) for n in range(1, 17)]}))")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)])))
    if run.returncode != 0:
        return {**out, "status": "error", "error": run.stderr[-2000:]}
    return {**out, **json.loads(run.stdout.strip().splitlines()[-1])}


RUNNERS = {"device": section_device, "equality": section_equality, "verify_cost": section_verify_cost,
           "throughput": section_throughput, "train": section_train, "llama_cuda": section_llama_cuda}


class Context:
    """What a section is given: the device, the shared work folder, and where to save what it has so far."""

    def __init__(self, device: str, work: Path, out: Path) -> None:
        self.device, self.work, self.out = device, work, out
        self.started = time.perf_counter()

    def clock(self) -> float:
        return time.perf_counter() - self.started

    def save(self, result: dict) -> None:
        partial = self.out.with_suffix(".partial")
        partial.write_text(json.dumps({**result, "seconds": round(self.clock(), 2)}, default=str))
        os.replace(partial, self.out)


def run_child(section: str, device: str, work: Path, out: Path) -> int:
    """One section in this process: its result (status ok unless it says otherwise) in `out`."""
    from engine.host import limit_torch_threads
    from engine.runtime import quiet_libraries
    limit_torch_threads()
    quiet_libraries()
    ctx = Context(device, work, out)
    try:
        result = RUNNERS[section](ctx)
        result.setdefault("status", "ok")
    except Exception as exc:
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    ctx.save(result)
    return 0


# ------------------------------------------------------------------ the parent: sections, budgets, the report

def run_section(section: str, device: str, work: Path, budget: float) -> dict:
    out = work / f"{section}.json"
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    command = [sys.executable, str(Path(__file__).resolve()), "--child", section, "--device", device,
               "--work", str(work)]
    log = work / f"{section}.log"
    with open(log, "w") as handle:
        try:
            code = subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=budget,
                                  env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                      filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))).returncode
            timed_out = False
        except subprocess.TimeoutExpired:
            code, timed_out = None, True
    result = json.loads(out.read_text()) if out.exists() else {}
    if timed_out:
        result["status"] = "timeout"
        result["error"] = f"stopped at its budget of {budget:.0f} s (what it had measured is kept)"
    elif code != 0 or "status" not in result:
        result.update(status="error", error=f"the section's process exited {code}: "
                      + log.read_text(errors="replace")[-2000:])
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["budget_seconds"] = round(budget)
    return result


def overall_ok(sections: dict) -> bool:
    """False when a correctness section failed, broke, or was not run; a timeout counts when it compared
    something and found nothing wrong."""
    for name in CORRECTNESS:
        result = sections.get(name)
        if result is None:
            continue
        rows = result.get("rows", [])
        wrong = [r for r in rows if r.get("result") in ("mismatch", "error")]
        if result["status"] in ("fail", "error") or wrong or (result["status"] == "timeout" and not rows):
            return False
    return True


def key_figures(name: str, result: dict) -> str:
    if result.get("status") in ("error", "skipped") and (result.get("error") or result.get("reason")):
        return (result.get("reason") or result.get("error", "")).strip().splitlines()[-1][:90]
    if name == "device":
        bf16 = "native bf16" if result.get("native_bf16") else "no native bf16"
        cap = f" sm {'.'.join(map(str, result['capability']))}" if result.get("capability") else ""
        free = f", {result['free_bytes'] / 2**30:.1f} GiB free" if result.get("free_bytes") else ""
        return f"{result.get('device')} {result.get('name', '')}{cap}, {bf16}{free}"
    if name == "equality":
        rows = result.get("rows", [])
        counts = {k: sum(r["result"] == k for r in rows) for k in ("identical", "near-tie", "mismatch", "error")}
        return f"{len(rows)} runs: " + ", ".join(f"{v} {k}" for k, v in counts.items())
    if name == "verify_cost":
        return "; ".join(f"{label}: cost(8)/cost(1) {c['relative'][min(7, len(c['relative']) - 1)]:.2f}"
                         for label, c in result.get("curves", {}).items())
    if name == "throughput":
        runs = ", ".join(f"{k} {v}" for k, v in result.get("runs", {}).items())
        return f"{result.get('shape')} tok/s: {runs} (compile {result.get('compile')})"
    if name == "train":
        return (f"{result.get('shape')}, {result.get('minutes', 0) * 60:.0f} s: step {result.get('step')}, "
                f"loss {result.get('loss')}, head {'written' if result.get('head_written') else 'not written'}")
    if name == "llama_cuda":
        return f"{result.get('device')}, cost(8)/cost(1) {result['relative'][7]:.2f}" if "relative" in result else ""
    return ""


def summary(report: dict) -> str:
    lines = [f"SpecScope GPU check on {report['device']}: {'OK' if report['ok'] else 'FAILED'} "
             f"({report['seconds']:.0f} s)", f"{'section':<12} {'status':<8} {'seconds':>7}  key figures"]
    for name, result in report["sections"].items():
        lines.append(f"{name:<12} {result.get('status', '?'):<8} {result.get('seconds', 0):>7.1f}  "
                     f"{key_figures(name, result)}")
    for row in report["sections"].get("equality", {}).get("rows", []):
        if row["result"] in ("mismatch", "error"):
            lines.append(f"  ✗ {row['shape']} {row['dtype']} {row['method']}: "
                         f"{row.get('explanation') or row.get('error')}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (tiny and 135M shapes)")
    parser.add_argument("--out", default="gpu_check.json", help="the JSON report (default: gpu_check.json here)")
    parser.add_argument("--only", action="append", choices=SECTIONS, help="run only this section (repeatable)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for everything, each section's budget scaled alike (default: 480 on a GPU, "
                             "180 on the CPU)")
    parser.add_argument("--work", default=None, help="folder for the models it builds (default: a temporary one)")
    parser.add_argument("--child", choices=SECTIONS, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args.child, args.device, Path(args.work), Path(args.work) / f"{args.child}.json")
    kind = "cpu" if args.device == "cpu" else "gpu"
    total = args.budget or TOTAL_BUDGET[kind]
    scale = total / TOTAL_BUDGET[kind]  # a larger --budget (a slow or busy machine) widens every section alike
    started = time.perf_counter()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="specscope-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {"ok": True, "device": args.device, "python": sys.version.split()[0], "sections": {}}
    try:
        for name in args.only or SECTIONS:
            budget = BUDGETS[name][kind == "cpu"] * scale
            left = total - (time.perf_counter() - started)
            if name == "llama_cuda" and (budget == 0 or shutil.which("nvcc") is None):
                report["sections"][name] = {"status": "skipped", "reason": "no CUDA toolkit (nvcc)"
                                            if shutil.which("nvcc") is None else "not on the CPU", "seconds": 0}
                continue
            if left < 10:
                report["sections"][name] = {"status": "skipped", "reason": "the total budget is spent", "seconds": 0}
                continue
            print(f"gpu_check: {name} (budget {min(budget, left):.0f} s)…", file=sys.stderr, flush=True)
            report["sections"][name] = run_section(name, args.device, work, min(budget, left))
        report["ok"] = overall_ok(report["sections"])
    finally:
        report["seconds"] = round(time.perf_counter() - started, 1)
        Path(args.out).write_text(json.dumps(report, indent=2, default=str))
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(summary(report))
    print(f"report: {Path(args.out).resolve()}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Downloads from the Hugging Face Hub into its local cache, by repo id, through `huggingface_hub`.

- Progress: a callback gets `DownloadProgress(bytes_done, bytes_total, …)`, from the downloading thread(s).
- Cancel: a `threading.Event`, checked on every chunk and between files. Files that finished stay in the
  cache; the one in flight is dropped. A retry skips finished files (huggingface_hub 2.x restarts a
  partial file from zero: it downloads to a per-process temporary file that it deletes on failure).
- Nothing half-registered: config.json is fetched last, and it is the download of the last file that makes
  the `main` ref point at the snapshot, so the model is only loadable (and `catalog` only marks it usable)
  once every file is in.
- Safety: `trust_remote_code` is never set here; `needs_remote_code` tells the GUI to ask. Pickle
  checkpoints are skipped when safetensors exist, and otherwise need `allow_pickle=True`.
- The token is passed through to huggingface_hub, never logged, and scrubbed from every error message; it is
  sent to the configured endpoint's host only (a request hook drops it on any other host, redirects included),
  and the endpoint must be https (plain http only for 127.0.0.1/localhost).

Touches the network (the hub, or HF_ENDPOINT) and the Hugging Face cache folder; no Qt.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urlsplit

from engine.backends.source import PICKLE_SUFFIXES
from engine.models.folder_facts import needs_remote_code
from engine.models.sources import hub_cache_dir
from engine.core.errors import DownloadCancelledError, DownloadError, UnsafeCheckpointError

OTHER_FRAMEWORK_SUFFIXES = (".h5", ".msgpack", ".onnx", ".onnx_data", ".tflite", ".ot", ".mlmodel", ".nemo",
                            ".engine", ".xml")  # TensorFlow, Flax, ONNX, Core ML, OpenVINO… weights we never use
CONFIG_FILE = "config.json"


@dataclass(frozen=True, slots=True)
class RepoFile:
    path: str  # relative to the repository root
    size: int | None


@dataclass(frozen=True, slots=True)
class DownloadPlan:
    repo_id: str
    revision: str  # what was asked for (main, a tag, a commit)
    commit: str  # the commit it resolved to: every file comes from this one
    files: tuple[RepoFile, ...]  # what will be fetched, config.json last
    skipped: tuple[str, ...]  # files left out (pickles next to safetensors, other frameworks' weights)
    gguf_choices: tuple[str, ...] = ()  # .gguf files of the repo, for a picker

    @property
    def total_bytes(self) -> int:
        return sum(f.size or 0 for f in self.files)


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    current_file: str | None


@dataclass(frozen=True, slots=True)
class DownloadResult:
    repo_id: str
    commit: str
    folder: Path  # the snapshot folder in the cache
    files: tuple[str, ...]
    bytes_downloaded: int  # by this call (finished files from an earlier try are not counted)
    needs_remote_code: bool

    @property
    def name(self) -> str:
        """What `engine.models.load.load_model` accepts: the repo id, or the path of a lone .gguf file."""
        ggufs = [f for f in self.files if f.lower().endswith(".gguf")]
        if len(ggufs) == 1 and not (self.folder / CONFIG_FILE).is_file():
            return str(self.folder / ggufs[0])
        return self.repo_id


ProgressCallback = Callable[[DownloadProgress], None]


class _Cancelled(Exception):
    """Raised inside huggingface_hub's download loop (from the progress bar) to stop a download."""


def scrub(text: str, token: str | None) -> str:
    """`text` with the token (and any bearer header) blanked out."""
    if token:
        text = text.replace(token, "***")
    return text


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def resolve_endpoint(endpoint: str | None = None) -> str:
    """The hub's address: the argument, else HF_ENDPOINT read now, else huggingface_hub's default. Only https
    (plain http for this computer only: 127.0.0.1, localhost); DownloadError naming HF_ENDPOINT otherwise."""
    from huggingface_hub import constants
    chosen = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).strip().rstrip("/")
    parts = urlsplit(chosen)
    local = parts.scheme == "http" and parts.hostname in LOCAL_HOSTS
    if not parts.hostname or not (parts.scheme == "https" or local):
        raise DownloadError(f"the hub address {chosen!r} (HF_ENDPOINT) must be an https:// address (plain http only "
                            "for 127.0.0.1 or localhost), so that the token and the files travel encrypted")
    guard_token(chosen)
    return chosen


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(str(url))
    default = {"https": 443, "http": 80}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


_TOKEN_ORIGIN: dict[str, tuple] = {}  # "origin": the one origin that may hear the token (the endpoint's)


def _strip_foreign_token(request) -> None:
    """httpx request hook (every request, redirects included): the token goes to the configured endpoint only."""
    allowed = _TOKEN_ORIGIN.get("origin")
    if "authorization" in request.headers and _origin(request.url) != allowed:
        del request.headers["authorization"]


def guard_token(endpoint: str) -> None:
    """From now on huggingface_hub's HTTP client sends the token to `endpoint`'s origin only: a redirect to
    any other host (a CDN, huggingface.co behind a mirror) goes without it."""
    import huggingface_hub

    first = "origin" not in _TOKEN_ORIGIN
    _TOKEN_ORIGIN["origin"] = _origin(endpoint)
    if first:
        from huggingface_hub.utils._http import default_client_factory

        def client_factory():
            client = default_client_factory()
            client.event_hooks["request"].append(_strip_foreign_token)
            return client

        huggingface_hub.set_client_factory(client_factory)


def _offline() -> bool:
    from huggingface_hub import constants
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return constants.HF_HUB_OFFLINE or value.strip().upper() in ("1", "ON", "YES", "TRUE")


def _translate(exc: BaseException, repo_id: str, token: str | None, endpoint: str) -> DownloadError:
    """A huggingface_hub / network exception as one clear sentence (never with the token in it)."""
    from huggingface_hub import errors as hf
    if isinstance(exc, DownloadError):
        return exc
    if isinstance(exc, hf.OfflineModeIsEnabled):
        message = f"downloads are off (HF_HUB_OFFLINE is set); unset it to download {repo_id}"
    elif isinstance(exc, hf.GatedRepoError):
        message = (f"{repo_id} is gated: accept its terms on its Hugging Face page, then use a token of that "
                   "account" + (" (this token has no access to it yet)" if token else ""))
    elif isinstance(exc, hf.RepositoryNotFoundError):
        message = (f"{repo_id} was not found on the Hugging Face Hub" +
                   (" (or this token cannot see it)" if token else
                    " (if it is private, add a Hugging Face token)"))
    elif isinstance(exc, hf.RevisionNotFoundError):
        message = f"that revision of {repo_id} does not exist"
    elif isinstance(exc, hf.RemoteEntryNotFoundError):
        message = f"a file of {repo_id} is missing on the hub ({_first_line(exc, token)})"
    elif isinstance(exc, hf.HfHubHTTPError) and getattr(exc.response, "status_code", None) == 401:
        message = "the Hugging Face token was refused; check it in the settings"
    elif isinstance(exc, hf.HfHubHTTPError):
        status = getattr(exc.response, "status_code", "?")
        message = f"the Hugging Face Hub answered with an error (HTTP {status}) for {repo_id}; try again later"
    elif _is_network_error(exc) or isinstance(exc, (hf.LocalEntryNotFoundError, ConnectionError, TimeoutError)):
        message = f"the Hugging Face Hub ({endpoint}) could not be reached; check the internet connection and try " \
                  "again"
    elif isinstance(exc, OSError) and exc.errno == 28:
        message = f"the disk is full: {repo_id} did not fit in {hub_cache_dir()}"
    elif isinstance(exc, OSError):
        message = f"{repo_id} could not be saved ({_first_line(exc, token)})"
    else:
        message = f"{repo_id} could not be downloaded ({type(exc).__name__}: {_first_line(exc, token)})"
    return DownloadError(scrub(message, token))


def _is_network_error(exc: BaseException) -> bool:
    """httpx's (or httpx2's, as huggingface_hub 2.x vendors it) transport errors, without importing either."""
    return any(cls.__name__ in ("TransportError", "TimeoutException", "NetworkError")
               and cls.__module__.split(".")[0].startswith("httpx") for cls in type(exc).__mro__)


def _first_line(exc: BaseException, token: str | None) -> str:
    lines = str(exc).strip().splitlines()
    return scrub(lines[0][:200] if lines else type(exc).__name__, token)


def _check_repo_id(repo_id: str) -> str:
    repo_id = (repo_id or "").strip()
    if repo_id.count("/") != 1 or any(not part for part in repo_id.split("/")) or " " in repo_id:
        raise DownloadError(f"{repo_id or '(empty)'} is not a repository id; use the form org/name, "
                            "e.g. Qwen/Qwen3-0.6B")
    return repo_id


def select_files(files: Iterable[RepoFile], wanted: Iterable[str] | None = None, *,
                 allow_pickle: bool = False, repo_id: str = "the repository") -> tuple[list[RepoFile], list[str]]:
    """(files to fetch, files skipped) from a repository's listing. With `wanted` (names or glob patterns)
    exactly those; otherwise safetensors (or one GGUF, or pickles with consent) plus the small files a model
    needs. Raises UnsafeCheckpointError / DownloadError when there is nothing safe to take."""
    files = list(files)
    names = [f.path for f in files]
    if wanted:
        patterns = list(wanted)
        chosen = [f for f in files if any(f.path == p or fnmatch.fnmatch(f.path, p) for p in patterns)]
        if not chosen:
            raise DownloadError(f"none of {', '.join(patterns)} is in {repo_id}")
        pickles = [f.path for f in chosen if f.path.lower().endswith(PICKLE_SUFFIXES)]
        if pickles and not allow_pickle:
            raise _pickle_refusal(repo_id, pickles)
        return _config_last(chosen), [n for n in names if n not in {f.path for f in chosen}]

    def is_pickle(name):
        return name.lower().endswith(PICKLE_SUFFIXES)

    def is_other(name):
        return name.lower().endswith(OTHER_FRAMEWORK_SUFFIXES) or name.startswith(("onnx/", "openvino/",
                                                                                   "coreml/"))

    safetensors = [n for n in names if n.endswith(".safetensors")]
    ggufs = [n for n in names if n.lower().endswith(".gguf")]
    pickles = [n for n in names if is_pickle(n)]
    if safetensors:
        index = "model.safetensors.index.json"
        keep_weights = set(safetensors)
        if index in names:  # shards the index names; not e.g. Mistral's duplicate consolidated.safetensors
            keep_weights = {n for n in safetensors if "/" not in n and not n.startswith("consolidated")}
        drop = lambda n: (is_pickle(n) or is_other(n) or n.lower().endswith(".gguf")  # noqa: E731
                          or (n.endswith(".safetensors") and n not in keep_weights))
    elif ggufs:
        if len(ggufs) > 1:
            raise DownloadError(f"{repo_id} has {len(ggufs)} GGUF files ({', '.join(ggufs[:4])}"
                                f"{', …' if len(ggufs) > 4 else ''}); choose one")
        drop = lambda n: is_pickle(n) or is_other(n)  # noqa: E731
    elif pickles:
        if not allow_pickle:
            raise _pickle_refusal(repo_id, pickles)
        drop = lambda n: is_other(n) or (n.startswith("original/"))  # noqa: E731
    else:
        raise DownloadError(f"{repo_id} has no model weights SpecScope can use (no .safetensors or .gguf file)")
    chosen = [f for f in files if not drop(f.path)]
    return _config_last(chosen), [f.path for f in files if drop(f.path)]


def _pickle_refusal(repo_id: str, pickles: list[str]) -> UnsafeCheckpointError:
    return UnsafeCheckpointError(
        f"{repo_id} has its weights only as pickle checkpoints ({', '.join(pickles[:3])}), which can run any code "
        "on this computer when loaded; download them only if you trust the author (allow pickle checkpoints)")


def _config_last(files: list[RepoFile]) -> list[RepoFile]:
    return sorted(files, key=lambda f: (f.path == CONFIG_FILE, f.path))


def plan_download(repo_id: str, *, revision: str | None = None, token: str | None = None,
                  files: Iterable[str] | None = None, allow_pickle: bool = False,
                  endpoint: str | None = None) -> DownloadPlan:
    """Ask the hub what `download` would fetch (sizes included), without fetching anything."""
    from huggingface_hub import HfApi
    repo_id = _check_repo_id(repo_id)
    endpoint = resolve_endpoint(endpoint)
    if _offline():
        raise DownloadError(f"downloads are off (HF_HUB_OFFLINE is set); unset it to download {repo_id}")
    try:
        info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision or "main", token=token or False,
                                                   files_metadata=True)
    except Exception as exc:  # noqa: BLE001 -- every failure becomes one typed sentence
        raise _translate(exc, repo_id, token, endpoint) from None
    listing = [RepoFile(s.rfilename, s.size) for s in (info.siblings or [])]
    chosen, skipped = select_files(listing, files, allow_pickle=allow_pickle, repo_id=repo_id)
    if not info.sha:
        raise DownloadError(f"the hub did not say which commit of {repo_id} to download; try again")
    return DownloadPlan(repo_id=repo_id, revision=revision or "main", commit=info.sha, files=tuple(chosen),
                        skipped=tuple(skipped),
                        gguf_choices=tuple(f.path for f in listing if f.path.lower().endswith(".gguf")))


def download(repo_id: str, *, revision: str | None = None, token: str | None = None,
             files: Iterable[str] | None = None, allow_pickle: bool = False,
             progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
             endpoint: str | None = None, cache_dir: str | os.PathLike | None = None,
             max_workers: int = 4, plan: DownloadPlan | None = None) -> DownloadResult:
    """Download a model into the Hugging Face cache. Raises DownloadCancelledError when `cancel` is set
    (finished files are kept: call again to continue), UnsafeCheckpointError, or DownloadError."""
    endpoint = resolve_endpoint(endpoint)
    plan = plan or plan_download(repo_id, revision=revision, token=token, files=files, allow_pickle=allow_pickle,
                                 endpoint=endpoint)
    job = _Download(plan, token=token, endpoint=endpoint,
                    cache_dir=str(Path(cache_dir) if cache_dir is not None else hub_cache_dir()),
                    progress=progress, cancel=cancel or threading.Event())
    try:
        job.run(max_workers)
    except _Cancelled:
        raise DownloadCancelledError(
            f"the download of {plan.repo_id} was cancelled; {job.state['files_done']} of {len(plan.files)} files "
            "are kept and downloading it again continues from there") from None
    except DownloadError:
        raise
    except Exception as exc:  # noqa: BLE001 -- every failure becomes one typed sentence
        raise _translate(exc, plan.repo_id, token, endpoint) from None
    return job.result()


class _Download:
    """One download of a plan: which files are cached already, the byte and file counters (shared by the
    downloading threads under `lock`), and the snapshot folder the files land in."""

    def __init__(self, plan: DownloadPlan, *, token: str | None, endpoint: str, cache_dir: str,
                 progress: ProgressCallback | None, cancel: threading.Event) -> None:
        self.plan, self.token, self.endpoint, self.cache_dir = plan, token, endpoint, cache_dir
        self.progress, self.cancel = progress, cancel
        self.stop = threading.Event()  # set when one file failed: the others stop at their next chunk
        self.lock = threading.Lock()
        self.state = {"done": 0, "files_done": 0, "downloaded": 0}
        self.last = plan.files[-1].path if plan.files else None  # config.json when there is one
        self.cached_paths: set[str] = set()
        self.local_paths: dict[str, str] = {}

    def report(self, current: str | None) -> None:
        if self.progress is not None:
            total, done = self.plan.total_bytes, self.state["done"]
            self.progress(DownloadProgress(min(done, total) if total else done, total, self.state["files_done"],
                                           len(self.plan.files), current))

    def run(self, max_workers: int) -> None:
        """Every file but the last in parallel, then the last one (also when cached: it writes the ref)."""
        from huggingface_hub import try_to_load_from_cache
        pending = []
        for f in self.plan.files:
            hit = try_to_load_from_cache(self.plan.repo_id, f.path, cache_dir=self.cache_dir,
                                         revision=self.plan.commit)
            if isinstance(hit, str):
                self.cached_paths.add(f.path)
                self.state["done"] += f.size or 0
                self.state["files_done"] += 1
            else:
                pending.append(f)
        self.report(None)
        self._fetch_all([f for f in pending if f.path != self.last], max_workers)
        if self.last is not None:
            self.fetch(self.plan.files[-1])

    def _fetch_all(self, body: list[RepoFile], max_workers: int) -> None:
        """Fetch `body` on a thread pool; the first failure stops the rest and is raised."""
        errors: list[BaseException] = []
        if body:
            with ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="hf-download") as pool:
                futures = [pool.submit(self.fetch, f) for f in body]
                wait(futures, return_when=FIRST_EXCEPTION)
                if any(fut.done() and fut.exception() for fut in futures):
                    self.stop.set()
                for fut in futures:
                    if not fut.cancel() and fut.exception() is not None:
                        errors.append(fut.exception())
        real = [e for e in errors if not isinstance(e, _Cancelled)]
        if real:
            raise real[0]
        if errors or self.cancel.is_set():
            raise _Cancelled

    def fetch(self, f: RepoFile) -> None:
        from huggingface_hub import hf_hub_download
        if self.cancel.is_set() or self.stop.is_set():
            raise _Cancelled
        counter = {"streamed": 0}
        bar_class = _progress_bar_class(f.path, counter, self.cancel, self.stop, self.lock, self.state,
                                        self.report)
        # every file from the resolved commit; the last one through the asked-for revision, which is what
        # writes refs/<revision>: the snapshot becomes "the model" only once everything is in
        file_revision = self.plan.revision if f.path == self.last else self.plan.commit
        try:
            self.local_paths[f.path] = hf_hub_download(self.plan.repo_id, f.path, revision=file_revision,
                                                       cache_dir=self.cache_dir, token=self.token or False,
                                                       endpoint=self.endpoint, tqdm_class=bar_class)
        except BaseException:
            with self.lock:  # the partial file is gone: so are its bytes
                self.state["done"] -= counter["streamed"]
            raise
        if f.path in self.cached_paths:  # counted before the start
            return
        with self.lock:
            if f.size is not None:  # count the file at its listed size, however it was streamed
                self.state["done"] += f.size - counter["streamed"]
            self.state["files_done"] += 1
        self.report(f.path)

    def result(self) -> DownloadResult:
        plan, last = self.plan, self.last
        if last is None:
            raise DownloadError(f"{plan.repo_id} has no files to download")
        folder = Path(self.local_paths[last]).parents[len(Path(last).parts) - 1]  # the snapshot folder
        if folder.name != plan.commit:  # the last file came from a newer commit than the others
            raise DownloadError(f"{plan.repo_id} changed on the hub during the download; download it again")
        return DownloadResult(repo_id=plan.repo_id, commit=plan.commit, folder=folder,
                              files=tuple(f.path for f in plan.files), bytes_downloaded=self.state["downloaded"],
                              needs_remote_code=needs_remote_code(folder))


def _progress_bar_class(file: str, counter: dict, cancel: threading.Event, stop: threading.Event,
                        lock: threading.Lock, state: dict, report):
    """A tqdm class for huggingface_hub that shows nothing, counts bytes and stops on cancel."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class _Bar(hf_tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            if cancel.is_set() or stop.is_set():
                raise _Cancelled
            with lock:
                state["done"] += n
                state["downloaded"] += n
                counter["streamed"] += n
            report(file)
            if cancel.is_set():  # asked from the progress callback itself: stop now, not a chunk later
                raise _Cancelled
            return super().update(n)

        # Having these makes huggingface_hub route Xet's network counter into this same bar instead of a
        # second one: bytes are counted once, by update(); transfers only give another chance to cancel.
        def update_transfer(self, n=1):
            if cancel.is_set() or stop.is_set():
                raise _Cancelled

        def set_transfer_postfix_str(self, *args, **kwargs):
            pass

    return _Bar

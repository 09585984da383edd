"""The data plane around DVC: build the raw world, version it, reproduce stages,
and point DVC at an S3 remote.

DVC owns the file-in/file-out stages in ``dvc.yaml`` (chunk → embed → index);
this module only invokes DVC's CLI and reads its lock files, so Prefect and the
console scripts share one implementation and never re-declare a stage.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from advrag.common.fileio import file_sha256
from advrag.common.redact import redact

if TYPE_CHECKING:
    from advrag.config import DataFiles
    from advrag.datasets.world import WorldConfig

DVC_ENV = {"DVC_NO_ANALYTICS": "1", "DO_NOT_TRACK": "1"}


class DvcError(RuntimeError):
    """A DVC command failed; the message carries its output."""


def run_dvc(args: list[str], root: Path = Path(".")) -> str:
    """Run ``dvc <args>`` in ``root`` with this interpreter's scripts on PATH."""
    env = {**os.environ, **DVC_ENV}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    cmd = [sys.executable, "-m", "dvc", *args]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DvcError(redact(
            f"`dvc {' '.join(args)}` failed in {root.resolve()} (exit {proc.returncode}):\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        ))
    return proc.stdout


def configure_s3_remote(name: str, url: str, endpoint_url: str | None = None, *,
                        default: bool = True, root: Path = Path("."),
                        access_key_id: str | None = None, secret_access_key: str | None = None) -> None:
    """Point DVC at an S3 (or S3-compatible) remote; re-running replaces it.

    ``endpoint_url`` is for MinIO, moto or other non-AWS servers. Credentials,
    when given, go to the git-ignored ``.dvc/config.local`` (mode 0600), never the committed
    ``.dvc/config``, and never through a command line (another user could read it in the
    process list); without them DVC uses boto3's usual chain (``AWS_*``
    variables, ``~/.aws``, an instance role).
    """
    if not url.startswith("s3://") or len(url) <= len("s3://"):
        raise ValueError(f"DVC S3 remote URL {url!r} must look like s3://bucket/prefix.")
    if endpoint_url and not endpoint_url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint URL {endpoint_url!r} must start with http:// or https://, "
                         "e.g. http://127.0.0.1:9000.")
    if bool(access_key_id) != bool(secret_access_key):
        raise ValueError("give both access_key_id and secret_access_key, or neither.")
    run_dvc(["remote", "add", "--force", *(["--default"] if default else []), name, url], root)
    if endpoint_url:
        run_dvc(["remote", "modify", name, "endpointurl", endpoint_url], root)
    if access_key_id:
        write_local_credentials(Path(root) / ".dvc" / "config.local", name,
                                {"access_key_id": access_key_id,
                                 "secret_access_key": secret_access_key})


def write_local_credentials(path: Path, remote: str, values: dict[str, str]) -> None:
    """Set ``values`` on DVC remote ``remote`` in ``path`` (a ``config.local``, DVC's configobj
    format), keeping what else it holds; the file is written with mode 0600, atomically."""
    from configobj import ConfigObj

    config = ConfigObj(str(path) if path.is_file() else None)
    section = f'remote "{remote}"'
    config.setdefault(section, {}).update(values)
    lines = config.write()
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(path.with_suffix(".tmp"), path)


def build_world(out_dir: Path, config: WorldConfig) -> Path:
    """Generate the offline world and write its corpus and QA splits to ``out_dir``."""
    from advrag.datasets.world import generate_world, write_world

    write_world(generate_world(config), out_dir)
    return out_dir


def import_files(files: DataFiles, out_dir: Path) -> Path:
    """Your files (``data.files``) copied under ``out_dir`` as the stages read them:
    ``corpus.jsonl`` byte for byte, and ``train/dev/test.jsonl`` as QA JSON lines (a JSON
    array or parquet converted). A file whose content is already there is left untouched, so
    DVC sees no change; each is replaced whole."""
    from advrag.common.fileio import atomic_file
    from advrag.datasets.loaders import load_qa

    out_dir.mkdir(parents=True, exist_ok=True)
    corpus = out_dir / "corpus.jsonl"
    if not corpus.is_file() or not _same_bytes(files.corpus, corpus):
        with atomic_file(corpus) as tmp:
            shutil.copyfile(files.corpus, tmp)
    for split in ("train", "dev", "test"):
        target, records = out_dir / f"{split}.jsonl", load_qa(getattr(files, split))
        text = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in records)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            with atomic_file(target) as tmp:
                tmp.write_text(text, encoding="utf-8")
    return out_dir


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (sizes first, then SHA-256)."""
    if a.stat().st_size != b.stat().st_size:
        return False
    return file_sha256(a) == file_sha256(b)


DATA_PARAMS = ("corpus", "dir")
"""``params.yaml``'s ``data:`` keys the pipeline sets: the corpus the chunk stage reads, and the
directory of the QA splits the curate and gar-slices stages read."""


def _data_param(key: str) -> re.Pattern[str]:
    """The ``  key: VALUE`` line of ``params.yaml``'s ``data:`` section (its indented block)."""
    return re.compile(rf"^(data:[ \t]*\n(?:  .*\n)*?  {key}:[ \t]*)(\S+)(.*)$", re.M)


def point_stages_at(corpus: Path, root: Path = Path(".")) -> bool:
    """Set ``data.corpus`` in ``root/params.yaml`` to ``corpus`` and ``data.dir`` to its
    directory (the world's or your files'), so `dvc repro` chunks that corpus and the curate
    and gar-slices stages read those splits; the rest of the file is left as written. True when
    it changed."""
    params = root / "params.yaml"
    text = params.read_text()
    values = {"corpus": str(corpus), "dir": str(corpus.parent)}
    current = (yaml.safe_load(text) or {}).get("data", {})
    for key in DATA_PARAMS:
        if current.get(key) is None or not _data_param(key).search(text):
            raise DvcError(f"{params.resolve()} has no data.{key} line (under 'data:', "
                           f"'  {key}: PATH'), which dvc.yaml's stages read: add it")
    if all(current[key] == values[key] for key in DATA_PARAMS):
        return False
    for key in DATA_PARAMS:
        text = _data_param(key).sub(lambda m, key=key: f"{m[1]}{values[key]}{m[3]}", text,
                                    count=1)
    params.write_text(text)
    return True


def version_raw_data(path: Path, root: Path = Path(".")) -> str:
    """``dvc add`` the raw-data directory (a no-op when unchanged); returns its md5."""
    run_dvc(["add", "--quiet", str(path)], root)
    return raw_data_md5(root / f"{path}.dvc")


def raw_data_md5(dvc_file: Path) -> str:
    """The md5 that a ``.dvc`` pointer file records for its output."""
    outs = yaml.safe_load(dvc_file.read_text())["outs"]
    return outs[0]["md5"]


DATA_STAGES = ("chunk", "embed", "index", "bm25")
"""The data plane's stages; ``dvc.yaml``'s others (``policy-hash``, ``curate``) roll out a
policy and run only when named (``dvc repro curate``)."""


def reproduce(root: Path = Path("."), targets: list[str] | None = None) -> str:
    """``dvc repro`` of ``targets`` (default: every stage): rebuild only what changed."""
    return run_dvc(["repro", "--quiet", *(targets or [])], root)


def data_version(root: Path = Path(".")) -> dict[str, str]:
    """Content hashes of the raw data and every DVC stage output, plus one digest.

    Read from ``data.dvc`` and ``dvc.lock`` (what DVC itself recorded), so the
    version logged to MLflow is exactly the one ``dvc checkout`` can restore.
    """
    hashes: dict[str, str] = {}
    for pointer in sorted(p for p in root.glob("*.dvc") if p.is_file()):
        hashes[pointer.stem] = raw_data_md5(pointer)
    lock = root / "dvc.lock"
    if lock.is_file():
        stages = (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
        for name, stage in sorted(stages.items()):
            for out in stage.get("outs", []):
                hashes[f"{name}:{out['path']}"] = out.get("md5", "")
    digest = hashlib.sha256(repr(sorted(hashes.items())).encode()).hexdigest()[:12]
    return {"digest": digest, **hashes}

"""Hub sources against the fixture hub (tests/fixtures/hub_server.py): the real huggingface_hub client, in an
mtpc process of its own (its environment is read when huggingface_hub is imported, as a user's shell sets it),
talking to 127.0.0.1 only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.fixtures.checkpoints import tiny_arch, write_hf_checkpoint
from tests.fixtures.safetensors_writer import write_safetensors
from tests.fixtures.hub_server import FixtureRepo, HubServer, hub_env

TOKEN = "hf_fixture_token"
OTHER_TOKEN = "hf_fixture_token_without_the_gated_repo"
REPO = "acme/tiny-mtp"
GATED = "acme/tiny-mtp-gated"
CPU = "targets: {onnxruntime_genai: {version: '0.18.0', execution_provider: cpu}}\n"


def run_mtpc(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mtpc", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def write_spec(folder: Path, source: str, name: str = "tiny-hub") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"mtpc: 1\nname: {name}\nsource: {source}\n{CPU}", encoding="utf-8")
    return path


def package_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    """The tiny Qwen3.5 checkpoint with its head, in two shards, with a tokenizer: what the hub repo holds."""
    return write_hf_checkpoint(tmp_path_factory.mktemp("hub-repo") / "tiny", tiny_arch(), sharded=True, tokenizer=True)


@pytest.fixture(scope="session")
def repo_folder(checkpoint, tmp_path_factory) -> Path:
    """The repo as a release holds it: the checkpoint, a shard of vision-tower tensors the text model does not
    read (listed in the index), and other formats compile must not download."""
    folder = tmp_path_factory.mktemp("hub-release") / "tiny"
    shutil.copytree(checkpoint, folder)
    write_safetensors(folder / "model-vision.safetensors",
                      {"model.visual.patch_embed.proj.weight": np.ones((8, 3, 2, 4, 4), np.float32)})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.visual.patch_embed.proj.weight"] = "model-vision.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    (folder / "pytorch_model.bin").write_bytes(bytes(range(256)) * 400)
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"not for mtpc" * 100)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny\n")
    return folder


# What compile reads of `repo_folder`: everything but the vision shard and the other formats.
READ = ("README.md", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture(scope="session")
def hub(repo_folder) -> HubServer:
    """One server for the tests that do not stop it: the public repo (tag v1 on main) and a gated copy."""
    server = HubServer({REPO: FixtureRepo.of(repo_folder, tags=("v1",)), GATED: FixtureRepo.of(repo_folder, gated=True)},
                       token=TOKEN, other_tokens=(OTHER_TOKEN,)).start()
    yield server
    server.stop()


@pytest.fixture
def env(hub, tmp_path):
    """An empty cache and the token, pointed at the session's server."""
    return hub_env(hub, tmp_path / "hf-home", token=TOKEN)

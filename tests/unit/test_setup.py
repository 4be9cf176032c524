"""The README's set-up paths that need no cluster: the chart rendered locally, the image named by IMAGE and
TAG, the wheel's builder in the dev extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent.parent


def test_the_chart_renders_locally_with_the_chosen_image() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "scripts/render_chart.py",
            "--set",
            "image.repository=reg.example/pm",
            "--set",
            "image.tag=t1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert deployments
    images = {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"reg.example/pm:t1"}


def test_make_image_and_chart_use_image_and_tag() -> None:
    done = subprocess.run(
        [
            "make",
            "-n",
            "-o",
            ".venv/.installed",
            "image",
            "chart",
            "IMAGE=reg.example/pm",
            "TAG=t1",
            "CONTAINER=podman",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "-m build --wheel" in done.stdout and "podman build -t reg.example/pm:t1 ." in done.stdout
    assert "image.repository=reg.example/pm --set image.tag=t1" in done.stdout


def test_the_wheel_builder_is_in_the_dev_extra() -> None:
    assert importlib.util.find_spec("build") is not None
    assert '"build' in (REPO / "pyproject.toml").read_text()

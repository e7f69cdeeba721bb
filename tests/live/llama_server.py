"""Starting llama-cpp-python's OpenAI-compatible server from its cached build.

`build_server.sh` (beside this file) builds it once into a cache folder
outside the checkout; `build_dir()` finds that build, `start_server()` runs
it on a free loopback port and returns once `/v1/models` answers.
`LiveServer.stop()` ends exactly the process it started.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2

BUILD_SCRIPT = Path(__file__).with_name("build_server.sh")
READY_DEADLINE = 120.0
MODEL_NAME = "smollm2-135m-instruct"
N_CTX = 4096


@dataclass
class LiveServer:
    """One running llama.cpp server: where it answers, and the process to end."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """End the process this fixture started (its pid only), then reap it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def build_dir() -> Path | None:
    """The cached build, or None when it has not been built."""
    found = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--path"], capture_output=True, text=True, check=False
    )
    path = Path(found.stdout.strip().splitlines()[-1]) if found.stdout.strip() else None
    return path if found.returncode == 0 else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(build: Path, log: Path) -> LiveServer:
    """Start a server on the cached build and wait until `/v1/models` answers."""
    port = _free_port()
    command = [
        str(build / "venv" / "bin" / "python"),
        "-m",
        "llama_cpp.server",
        "--model",
        str(build / "model.gguf"),
        "--model_alias",
        MODEL_NAME,
        "--chat_format",
        "chatml-function-calling",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    server = LiveServer(process, port, log)
    deadline = time.monotonic() + READY_DEADLINE
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"llama.cpp server exited with {process.returncode}:\n{server.log_tail()}"
            )
        try:
            if httpx2.get(f"{server.base_url}/models", timeout=2.0).status_code == 200:
                return server
        except httpx2.HTTPError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(
                f"llama.cpp server not ready after {READY_DEADLINE:.0f} s:\n{server.log_tail()}"
            )
        time.sleep(0.2)  # polling a process that gives no other readiness signal

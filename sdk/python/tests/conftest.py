"""A real cabind of this build for the SDK's tests: its own state and run dirs, a fresh key."""

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("CABIN_BIN_DIR", ROOT / "build" / "bin"))


class Server:
    def __init__(self) -> None:
        self.key = secrets.token_hex(16)
        self.state_dir = tempfile.mkdtemp(prefix="cabin-state-")
        self.run_dir = tempfile.mkdtemp(prefix="cbr-", dir="/tmp")  # short: socket paths
        env = {**os.environ, "CABIN_API_KEY": self.key}
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "cabind"), "--listen", "127.0.0.1:0", "--state-dir", self.state_dir,
             "--run-dir", self.run_dir, "--on-shutdown", "delete"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.base = None
        listening = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                m = re.match(r"^cabind \S+ listening on (http://127\.0\.0\.1:\d+)$", line.strip())
                if m and not self.base:
                    self.base = m.group(1)
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(15):
            self.stop()
            raise RuntimeError("cabind did not listen within 15 s")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(25)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        # The microvm driver's run dir, which cabind makes beside its own.
        shutil.rmtree(self.run_dir + "-vm", ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()

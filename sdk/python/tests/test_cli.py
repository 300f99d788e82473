"""The `cabin` command against a real cabind: ids on stdout, the command's exit code passed
through, refusals as exit 1 with the server's code on stderr, usage errors as exit 2."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SDK_DIR = Path(__file__).resolve().parents[1]


def run_cli(*args, env=None, stdin=None):
    # This checkout's cli module, as build/bin/cabin and the installed `cabin` run it.
    env = {**os.environ, "CABIN_CONFIG": "/nonexistent", **(env or {}),
           "PYTHONPATH": str(SDK_DIR)}
    return subprocess.run([sys.executable, "-m", "cabin.cli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def cabin(server, *args, stdin=None, key=None):
    return run_cli(*args, stdin=stdin,
                   env={"CABIN_URL": server.base, "CABIN_API_KEY": key or server.key})


def test_create_ls_get_exec_rm(server):
    created = cabin(server, "create", "--resolution", "1024x768", "--json")
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    sid = info["id"]
    assert info["resolution"] == {"width": 1024, "height": 768}

    ls = cabin(server, "ls", "--json")
    assert sid in [s["id"] for s in json.loads(ls.stdout)["sessions"]]
    assert sid in cabin(server, "ls").stdout  # the table names it too

    assert cabin(server, "get", sid).stdout.startswith(f"id: {sid}\n")

    ok = cabin(server, "exec", sid, "--", "sh", "-c", "echo out; echo err >&2")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "out\n", "err\n")
    assert cabin(server, "exec", sid, "--", "sh", "-c", "exit 3").returncode == 3
    killed = cabin(server, "exec", sid, "--", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == 128 + 15
    piped = cabin(server, "exec", "--stdin", sid, "--", "cat", stdin="through stdin")
    assert piped.stdout == "through stdin"

    assert "/live?token=" in cabin(server, "live", sid).stdout
    assert "/cdp?token=" in cabin(server, "cdp", sid).stdout

    rm = cabin(server, "rm", sid)
    assert (rm.returncode, rm.stdout) == (0, f"{sid}\n")
    gone = cabin(server, "get", sid, "--json")
    assert json.loads(gone.stdout)["status"] == "ended"


def test_screenshot_to_a_file(server, tmp_path):
    sid = cabin(server, "create").stdout.strip()
    try:
        out = tmp_path / "screen.png"
        r = cabin(server, "screenshot", sid, "-o", str(out))
        assert r.returncode == 0, r.stderr
        assert out.read_bytes()[:4] == b"\x89PNG"
    finally:
        cabin(server, "rm", sid)


def test_rm_all_needs_yes_and_empties(server):
    ids = [cabin(server, "create").stdout.strip() for _ in range(2)]
    refused = cabin(server, "rm", "--all")
    assert refused.returncode == 2 and "-y" in refused.stderr
    assert set(ids) <= {s["id"] for s in json.loads(cabin(server, "ls", "--json").stdout)["sessions"]}
    assert cabin(server, "rm", "--all", "-y").returncode == 0
    assert json.loads(cabin(server, "ls", "--json").stdout)["sessions"] == []


def test_refusals_and_usage_errors(server):
    missing = cabin(server, "get", "ses_00000000000000000000")
    assert missing.returncode == 1
    assert "404 session_not_found" in missing.stderr
    assert missing.stdout == ""
    assert cabin(server, "ls", key="wrong").returncode == 1
    assert cabin(server, "create", "--resolution", "huge").returncode == 2
    assert cabin(server, "exec", "ses_00000000000000000000").returncode == 2
    assert cabin(server, "frobnicate").returncode == 2


def test_keys(server):
    made = cabin(server, "keys", "create", "cli-tenant", "--max-sessions", "1", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    assert key["id"] in cabin(server, "keys", "ls").stdout
    # The tenant's key works with the same command, and sees only its own sessions.
    assert json.loads(cabin(server, "ls", "--json", key=key["key"]).stdout)["sessions"] == []
    assert cabin(server, "keys", "rm", key["id"]).returncode == 0
    assert cabin(server, "ls", key=key["key"]).returncode == 1


def test_no_server_there_says_where_it_looked():
    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    r = run_cli("ls", env={"CABIN_URL": url, "CABIN_API_KEY": "k"})
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.startswith(f"cabin: cannot reach cabind at {url} (from CABIN_URL): "
                               "connection refused. Is cabind running there?"), r.stderr
    assert "Errno" not in r.stderr
    r = run_cli("--server", url, "--key", "k", "ls", env={"CABIN_URL": ""})
    assert f"at {url} (from --server)" in r.stderr

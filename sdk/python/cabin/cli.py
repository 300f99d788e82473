"""`cabin`: sessions from the shell.

Data goes to stdout, messages to stderr. Exit codes: 0 done; 1 the server refused (its code and
message on stderr) or could not be reached; 2 a usage error; `cabin exec` exits with the
command's own code (128 + N when signal N ended it).

The server and key come from --server/--key, else CABIN_URL/CABIN_API_KEY, else the file named
by CABIN_CONFIG or ~/.config/cabin/config (lines `url = ...` and `api_key = ...`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import httpx

from . import APIConnectionError, Cabin, CabinError

EXIT_REFUSED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def _config_file() -> Dict[str, str]:
    path = Path(os.environ.get("CABIN_CONFIG") or Path.home() / ".config" / "cabin" / "config")
    out: Dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip().strip('"')
    return out


def _client(args: argparse.Namespace) -> Cabin:
    conf = _config_file()
    # Where the URL came from, named when nothing answers there.
    if args.server:
        url, args.url_from = args.server, "--server"
    elif os.environ.get("CABIN_URL"):
        url, args.url_from = os.environ["CABIN_URL"], "CABIN_URL"
    elif conf.get("url"):
        url, args.url_from = conf["url"], "the config file"
    else:
        url, args.url_from = "http://127.0.0.1:8080", "the default"
    key = args.key or os.environ.get("CABIN_API_KEY") or conf.get("api_key")
    if not key:
        raise UsageError("no API key: pass --key, set CABIN_API_KEY, or put api_key in "
                         "~/.config/cabin/config")
    return Cabin(url, key, max_retries=0)


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _table(rows: List[List[str]], header: List[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def _resolution(text: str) -> Dict[str, int]:
    try:
        w, h = text.lower().split("x")
        return {"width": int(w), "height": int(h)}
    except ValueError:
        raise UsageError(f"--resolution {text}: want WIDTHxHEIGHT, e.g. 1280x800") from None


def cmd_create(c: Cabin, args: argparse.Namespace) -> int:
    spec: Dict[str, Any] = {}
    if args.driver:
        spec["driver"] = args.driver
    if args.resolution:
        spec["resolution"] = _resolution(args.resolution)
    if args.timeout is not None:
        spec["timeout_s"] = args.timeout
    if args.start_url:
        spec["start_url"] = args.start_url
    if args.network:
        try:
            spec["network"] = json.loads(Path(args.network).read_text())
        except (OSError, ValueError) as err:
            raise UsageError(f"--network {args.network}: {err}") from None
    s = c.sessions.create(spec)
    if args.json:
        _print_json(s.info)
    else:
        print(s.id)
    return 0


def cmd_ls(c: Cabin, args: argparse.Namespace) -> int:
    sessions = c.sessions.list(all=args.all)
    if args.json:
        _print_json({"sessions": sessions})
        return 0
    _table([[s["id"], s["status"], s["driver"], f'{s["resolution"]["width"]}x{s["resolution"]["height"]}',
             s["created_at"]] for s in sessions], ["ID", "STATUS", "DRIVER", "SCREEN", "CREATED"])
    return 0


def cmd_get(c: Cabin, args: argparse.Namespace) -> int:
    s = c.sessions.get(args.id)
    if args.json:
        _print_json(s.info)
    else:
        for k in ("id", "status", "driver", "created_at", "expires_at", "end_reason", "cdp_url",
                  "live_view_url"):
            if s.info.get(k) is not None:
                print(f"{k}: {s.info[k]}")
    return 0


def cmd_rm(c: Cabin, args: argparse.Namespace) -> int:
    if args.all and args.ids:
        raise UsageError("rm: name sessions or --all, not both")
    if not args.all and not args.ids:
        raise UsageError("rm: name the sessions to delete, or --all")
    ids = args.ids
    if args.all:
        if not args.yes:
            raise UsageError("rm --all deletes every session this key can see: add -y")
        ids = [s["id"] for s in c.sessions.list()]
    ended = [c.sessions.delete(i) for i in ids]
    if args.json:
        _print_json({"sessions": ended})
    else:
        for s in ended:
            print(s["id"])
    return 0


def cmd_exec(c: Cabin, args: argparse.Namespace) -> int:
    argv = args.command
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("exec: give the command after --, e.g. cabin exec ID -- ls -l")
    body: Dict[str, Any] = {"argv": argv}
    if args.timeout is not None:
        body["timeout_ms"] = int(args.timeout * 1000)
    if not sys.stdin.isatty() and args.stdin:
        body["stdin"] = sys.stdin.read()
    r = c.request("POST", f"/v1/sessions/{args.id}/exec", json=body)
    if args.json:
        _print_json(r)
    else:
        sys.stdout.write(r.get("stdout", ""))
        sys.stderr.write(r.get("stderr", ""))
        if r.get("timed_out"):
            print("cabin: the command ran past its timeout and was killed", file=sys.stderr)
    if r.get("exit_code") is not None:
        return int(r["exit_code"])
    sig = r.get("signal")
    number = getattr(signal, str(sig), None) if isinstance(sig, str) else sig
    return 128 + int(number) if number is not None else EXIT_REFUSED


def cmd_screenshot(c: Cabin, args: argparse.Namespace) -> int:
    fmt = args.format or ("jpeg" if args.output.lower().endswith((".jpg", ".jpeg")) else "png")
    data = c.request("GET", f"/v1/sessions/{args.id}/screenshot", params={"format": fmt}, raw=True)
    if args.output == "-":
        sys.stdout.buffer.write(data)
    else:
        Path(args.output).write_bytes(data)
        print(f"cabin: wrote {len(data)} bytes to {args.output}", file=sys.stderr)
    return 0


def cmd_live(c: Cabin, args: argparse.Namespace) -> int:
    body: Dict[str, Any] = {"scope": "control" if args.control else "view"}
    if args.ttl is not None:
        body["ttl_s"] = args.ttl
    t = c.request("POST", f"/v1/sessions/{args.id}/tokens", json=body)
    if args.json:
        _print_json(t)
    else:
        print(t["live_view_url"])
    return 0


def cmd_cdp(c: Cabin, args: argparse.Namespace) -> int:
    t = c.request("POST", f"/v1/sessions/{args.id}/tokens", json={"scope": "cdp"})
    if args.json:
        _print_json(t)
    else:
        print(t["cdp_url"])
    return 0


def cmd_logs(c: Cabin, args: argparse.Namespace) -> int:
    r = c.request("GET", f"/v1/sessions/{args.id}/logs")
    if args.json:
        _print_json(r)
    else:
        for line in r["lines"]:
            print(line)
    return 0


def cmd_vnc(c: Cabin, args: argparse.Namespace) -> int:
    # cabind's own forwarder: a local port for a native VNC client, over the authenticated
    # WebSocket; it runs until interrupted.
    here = Path(sys.argv[0]).resolve().parent
    cabind = os.environ.get("CABIND") or (str(here / "cabind") if (here / "cabind").exists()
                                          else shutil.which("cabind"))
    if not cabind:
        raise UsageError("vnc: cabind (the forwarder) is not found: set CABIND to its path")
    env = {**os.environ, "CABIN_API_KEY": c._config.headers["authorization"][len("Bearer "):]}
    argv = [cabind, "vnc-forward", "--server", c._config.base_url, "--port", str(args.port), args.id]
    os.execve(cabind, argv, env)
    return 0  # not reached


def cmd_keys(c: Cabin, args: argparse.Namespace) -> int:
    if args.keys_command == "create":
        body = {"name": args.name, "max_sessions": args.max_sessions,
                "max_creates_per_minute": args.max_creates_per_minute}
        k = c.request("POST", "/v1/keys", json=body)
        if args.json:
            _print_json(k)
        else:
            print(k["key"])
            print(f"cabin: key {k['id']}: shown once, keep it", file=sys.stderr)
    elif args.keys_command == "ls":
        keys = c.request("GET", "/v1/keys")["keys"]
        if args.json:
            _print_json({"keys": keys})
        else:
            _table([[k["id"], k["name"], str(k["max_sessions"]), str(k["max_creates_per_minute"])]
                    for k in keys], ["ID", "NAME", "MAX_SESSIONS", "CREATES/MIN"])
    else:
        r = c.request("DELETE", f"/v1/keys/{args.key_id}")
        _print_json(r) if args.json else print(args.key_id)
    return 0


def parser() -> argparse.ArgumentParser:
    def options(sub: bool) -> argparse.ArgumentParser:
        # Taken before or after the command; a command's own copy must not reset what was
        # given before it.
        o = argparse.ArgumentParser(add_help=False)
        d = {"default": argparse.SUPPRESS} if sub else {}
        o.add_argument("--server", help="cabind's URL (default CABIN_URL, then "
                       "http://127.0.0.1:8080)", **({"default": None} | d))
        o.add_argument("--key", help="the API key (default CABIN_API_KEY)",
                       **({"default": None} | d))
        o.add_argument("--json", action="store_true", help="print the API's JSON", **d)
        return o

    common = options(True)
    p = argparse.ArgumentParser(prog="cabin", description="Cabin sessions from the shell.",
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                parents=[options(False)])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("create", parents=[common], help="create a session; prints its id")
    c.add_argument("--driver", help="namespace or microvm (default: the server's)")
    c.add_argument("--resolution", help="WIDTHxHEIGHT, e.g. 1280x800")
    c.add_argument("--network", metavar="FILE", help="a JSON file with the egress policy")
    c.add_argument("--timeout", type=int, help="lifetime in seconds")
    c.add_argument("--start-url", help="the first page")
    c.set_defaults(run=cmd_create)

    c = sub.add_parser("ls", parents=[common], help="list sessions")
    c.add_argument("--all", action="store_true", help="ended ones too")
    c.set_defaults(run=cmd_ls)

    c = sub.add_parser("get", parents=[common], help="show a session")
    c.add_argument("id")
    c.set_defaults(run=cmd_get)

    c = sub.add_parser("rm", parents=[common], help="delete sessions")
    c.add_argument("ids", nargs="*", metavar="ID")
    c.add_argument("--all", action="store_true", help="every session the key can see")
    c.add_argument("-y", "--yes", action="store_true", help="needed with --all")
    c.set_defaults(run=cmd_rm)

    c = sub.add_parser("exec", parents=[common],
                       help="run a command in a session: cabin exec ID -- CMD...")
    c.add_argument("id")
    c.add_argument("--timeout", type=float, help="seconds (default 30)")
    c.add_argument("--stdin", action="store_true", help="send this shell's stdin to the command")
    c.add_argument("command", nargs=argparse.REMAINDER)
    c.set_defaults(run=cmd_exec)

    c = sub.add_parser("screenshot", parents=[common], help="save the screen")
    c.add_argument("id")
    c.add_argument("-o", "--output", required=True, help="a file (.png or .jpg), or - for stdout")
    c.add_argument("--format", choices=["png", "jpeg"])
    c.set_defaults(run=cmd_screenshot)

    c = sub.add_parser("live", parents=[common], help="print a live view URL")
    c.add_argument("id")
    c.add_argument("--control", action="store_true", help="with mouse and keyboard")
    c.add_argument("--ttl", type=int, help="seconds the URL works")
    c.set_defaults(run=cmd_live)

    c = sub.add_parser("cdp", parents=[common], help="print a CDP WebSocket URL")
    c.add_argument("id")
    c.set_defaults(run=cmd_cdp)

    c = sub.add_parser("logs", parents=[common], help="the sandbox's newest output lines")
    c.add_argument("id")
    c.set_defaults(run=cmd_logs)

    c = sub.add_parser("vnc", parents=[common], help="forward a local port to a VNC client")
    c.add_argument("id")
    c.add_argument("--port", type=int, default=5900, help="local port (default 5900; 0: any)")
    c.set_defaults(run=cmd_vnc)

    k = sub.add_parser("keys", parents=[common], help="tenant API keys (the admin key only)")
    ks = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    kc = ks.add_parser("create", parents=[common], help="mint a key; prints it once")
    kc.add_argument("name")
    kc.add_argument("--max-sessions", type=int, default=10)
    kc.add_argument("--max-creates-per-minute", type=int, default=60)
    ks.add_parser("ls", parents=[common], help="list keys")
    kr = ks.add_parser("rm", parents=[common], help="revoke a key")
    kr.add_argument("key_id")
    k.set_defaults(run=cmd_keys)
    return p


def _reason(err: BaseException) -> str:
    """The innermost cause in a few words: "connection refused", not "[Errno 111] ..."."""
    while err.__cause__ is not None or err.__context__ is not None:
        err = err.__cause__ or err.__context__
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"no such host ({err.strerror})" if err.strerror else "no such host"
    if isinstance(err, (TimeoutError, httpx.TimeoutException)):
        return "timed out"
    text = re.sub(r"^\[Errno -?\d+\] ", "", str(err)) or type(err).__name__
    return text[:1].lower() + text[1:]


def main(argv: Optional[List[str]] = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        with _client(args) as c:
            try:
                return args.run(c, args)
            except APIConnectionError as err:
                reason = _reason(err)
                what = "no answer from" if reason == "timed out" else "cannot reach"
                print(f"cabin: {what} cabind at {c._config.base_url} (from {args.url_from}): "
                      f"{reason}. Is cabind running there? Set CABIN_URL or pass --server "
                      "to name another.", file=sys.stderr)
                return EXIT_REFUSED
    except UsageError as err:
        print(f"cabin: {err}", file=sys.stderr)
        return EXIT_USAGE
    except CabinError as err:
        print(f"cabin: {err}", file=sys.stderr)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())

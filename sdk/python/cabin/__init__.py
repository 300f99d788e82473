"""Cabin's Python client: sync and async, on httpx.

    from cabin import Cabin
    with Cabin(base_url="http://127.0.0.1:8080", api_key=key) as cabin:
        with cabin.sessions.create(resolution={"width": 1280, "height": 800}) as s:
            print(s.exec(["echo", "hi"])["stdout"])
        # the session is deleted here

AsyncCabin is the same with `async with` and `await`.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import os
import time
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Sequence, Union

import httpx

__all__ = [
    "Cabin", "AsyncCabin", "Session", "AsyncSession", "CabinError", "BadRequestError",
    "AuthenticationError", "PermissionDeniedError", "NotFoundError", "ConflictError",
    "UnprocessableEntityError", "RateLimitError", "InternalServerError", "APIConnectionError",
]

Json = Dict[str, Any]


class CabinError(Exception):
    """An answer with a status of 400 or more: the server's code and message."""

    def __init__(self, status: int, code: str, message: str, body: Any,
                 retry_after_s: Optional[int]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.retry_after_s = retry_after_s


class BadRequestError(CabinError): pass
class AuthenticationError(CabinError): pass
class PermissionDeniedError(CabinError): pass
class NotFoundError(CabinError): pass
class ConflictError(CabinError): pass
class UnprocessableEntityError(CabinError): pass
class RateLimitError(CabinError): pass
class InternalServerError(CabinError): pass


class APIConnectionError(Exception):
    """No answer came: the server could not be reached, or took too long."""


_BY_STATUS = {400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError,
              404: NotFoundError, 409: ConflictError, 422: UnprocessableEntityError,
              429: RateLimitError}


def _error(res: httpx.Response, retry_after_s: Optional[int]) -> CabinError:
    try:
        body: Any = res.json()
    except ValueError:
        body = res.text
    err = body.get("error") if isinstance(body, dict) else None
    code = err.get("code", f"http_{res.status_code}") if isinstance(err, dict) else f"http_{res.status_code}"
    message = err.get("message", "") if isinstance(err, dict) else ""
    cls = _BY_STATUS.get(res.status_code,
                         InternalServerError if res.status_code >= 500 else CabinError)
    return cls(res.status_code, code, message, body, retry_after_s)


def _retry_after(res: httpx.Response) -> Optional[int]:
    value = res.headers.get("retry-after", "")
    return int(value) if value.isdigit() else None


class _Config:
    def __init__(self, base_url: Optional[str], api_key: Optional[str], max_retries: int,
                 max_retry_wait_s: float, timeout_s: float) -> None:
        self.base_url = (base_url or os.environ.get("CABIN_URL") or "http://127.0.0.1:8080").rstrip("/")
        key = api_key or os.environ.get("CABIN_API_KEY")
        if not key:
            raise ValueError("Cabin: no API key (pass api_key, or set CABIN_API_KEY)")
        self.headers = {"authorization": f"Bearer {key}"}
        self.max_retries = max_retries
        self.max_retry_wait_s = max_retry_wait_s
        self.timeout_s = timeout_s

    def should_retry(self, res: httpx.Response, attempt: int) -> Optional[int]:
        # The server says when to come back only where nothing was done (a quota, a rate, no
        # room, a drain): then asking again is safe, for a create too.
        wait = _retry_after(res)
        if res.status_code >= 400 and wait is not None and attempt < self.max_retries \
                and wait <= self.max_retry_wait_s:
            return wait
        return None


def _body(command: Union[Sequence[str], Json]) -> Json:
    return {"argv": list(command)} if not isinstance(command, dict) else command


def _computer_body(actions: Union[Json, List[Json]]) -> Json:
    return {"actions": actions} if isinstance(actions, list) else actions


class Cabin:
    """A synchronous client. `with Cabin() as cabin:` closes its connections at the end."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 max_retries: int = 2, max_retry_wait_s: float = 60, timeout_s: float = 300,
                 transport: Optional[httpx.BaseTransport] = None) -> None:
        self._config = _Config(base_url, api_key, max_retries, max_retry_wait_s, timeout_s)
        self._http = httpx.Client(base_url=self._config.base_url, headers=self._config.headers,
                                  timeout=timeout_s, transport=transport)
        self.sessions = Sessions(self)

    def __enter__(self) -> "Cabin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, json: Any = None,
                params: Optional[Json] = None, headers: Optional[Dict[str, str]] = None,
                raw: bool = False, content: Optional[bytes] = None) -> Any:
        """One request to the API: the JSON answer (`raw`: the bytes). Raises CabinError.
        `content`: bytes sent as they are instead of JSON."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        attempt = 0
        while True:
            try:
                res = self._http.request(method, path, json=json, params=params, headers=headers,
                                         content=content)
            except httpx.TransportError as err:
                raise APIConnectionError(f"{method} {path}: {err}") from err
            if res.status_code < 400:
                if raw:
                    return res.content
                return res.json() if res.content else None
            wait = self._config.should_retry(res, attempt)
            if wait is None:
                raise _error(res, _retry_after(res))
            time.sleep(wait)
            attempt += 1


def _sse_data(lines: Iterator[str]) -> Iterator[Json]:
    for line in lines:
        if line.startswith("data: "):
            yield jsonlib.loads(line[6:])


class Sessions:
    def __init__(self, cabin: Cabin) -> None:
        self._cabin = cabin

    def create(self, spec: Optional[Json] = None, *, idempotency_key: Optional[str] = None,
               **fields: Any) -> "Session":
        """Creates a session; answers once it is ready. `with ... as s:` deletes it at the end."""
        body = {**(spec or {}), **fields}
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        return Session(self._cabin, self._cabin.request("POST", "/v1/sessions", json=body,
                                                        headers=headers))

    def list(self, *, all: bool = False) -> List[Json]:
        return self._cabin.request("GET", "/v1/sessions", params={"all": 1 if all else None})["sessions"]

    def get(self, session_id: str) -> "Session":
        return Session(self._cabin, self._cabin.request("GET", f"/v1/sessions/{session_id}"))

    def delete(self, session_id: str) -> Json:
        return self._cabin.request("DELETE", f"/v1/sessions/{session_id}")


class _SessionRecord:
    """What both session classes hold: the session's record as last read, and its URLs."""

    def __init__(self, info: Json) -> None:
        self.id: str = info["id"]
        self.info = info

    @property
    def _path(self) -> str:
        return f"/v1/sessions/{self.id}"

    @property
    def cdp_url(self) -> str:
        return self.info["cdp_url"]

    @property
    def live_view_url(self) -> Optional[str]:
        return self.info.get("live_view_url")


class Session(_SessionRecord):
    """One session: its record as last read (`info`), and what can be done with it."""

    def __init__(self, cabin: Cabin, info: Json) -> None:
        super().__init__(info)
        self._cabin = cabin
        self.previews = Previews(cabin, self._path)
        self.files = Files(cabin, self._path)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass  # already gone: ended on its own, or deleted in the block

    def refresh(self) -> Json:
        self.info = self._cabin.request("GET", self._path)
        return self.info

    def delete(self) -> Json:
        self.info = self._cabin.request("DELETE", self._path)
        return self.info

    def computer(self, actions: Union[Json, List[Json]]) -> Json:
        """One action or a list of them, in Anthropic's, OpenAI's or Cabin's vocabulary."""
        return self._cabin.request("POST", f"{self._path}/computer", json=_computer_body(actions))

    def screenshot(self, *, format: Optional[str] = None, quality: Optional[int] = None) -> bytes:
        return self._cabin.request("GET", f"{self._path}/screenshot",
                                   params={"format": format, "quality": quality}, raw=True)

    def exec(self, command: Union[Sequence[str], Json], **fields: Any) -> Json:
        """Runs a command: `exec(["ls", "-l"])`, or `exec({"argv": [...], "stdin": "..."})`."""
        return self._cabin.request("POST", f"{self._path}/exec", json={**_body(command), **fields})

    def pause(self, mode: Optional[str] = None) -> Json:
        self.info = self._cabin.request("POST", f"{self._path}/pause",
                                        json={"mode": mode} if mode else {})
        return self.info

    def resume(self) -> Json:
        self.info = self._cabin.request("POST", f"{self._path}/resume", json={})
        return self.info

    def keepalive(self) -> Json:
        self.info = self._cabin.request("POST", f"{self._path}/keepalive", json={})
        return self.info

    def fork(self, count: int = 1) -> List["Session"]:
        r = self._cabin.request("POST", f"{self._path}/fork", json={"count": count})
        return [Session(self._cabin, info) for info in r["sessions"]]

    def token(self, scope: str, ttl_s: Optional[int] = None) -> Json:
        body: Json = {"scope": scope}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self._cabin.request("POST", f"{self._path}/tokens", json=body)

    def downloads(self) -> List[Json]:
        """What the browser downloaded, oldest first; read one with `files.read(d["path"])`."""
        return self._cabin.request("GET", f"{self._path}/downloads")["downloads"]

    def get_clipboard(self) -> str:
        return self._cabin.request("GET", f"{self._path}/clipboard")["text"]

    def set_clipboard(self, text: str) -> None:
        self._cabin.request("PUT", f"{self._path}/clipboard", json={"text": text})

    def take_control(self, ttl_s: Optional[int] = None) -> Json:
        """The input lock: `computer` input from others is refused until it is released."""
        body: Json = {"action": "take"}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self._cabin.request("POST", f"{self._path}/control", json=body)

    def release_control(self) -> Json:
        return self._cabin.request("POST", f"{self._path}/control", json={"action": "release"})

    def events(self, *, since: Optional[int] = None) -> Iterator[Json]:
        """The session's events as they happen (`since`: first the kept ones after that seq),
        until the session ends; stop early by breaking out of the loop."""
        params = {"since": since} if since is not None else {}
        try:
            with self._cabin._http.stream("GET", f"{self._path}/events", params=params,
                                          timeout=httpx.Timeout(None, connect=30)) as res:
                if res.status_code >= 400:
                    res.read()
                    raise _error(res, None)
                yield from _sse_data(res.iter_lines())
        except httpx.TransportError as err:
            raise APIConnectionError(f"GET {self._path}/events: {err}") from err


class Files:
    """The sandbox's files below its home directory and /tmp."""

    def __init__(self, cabin: Cabin, path: str) -> None:
        self._cabin = cabin
        self._path = path

    def write(self, path: str, data: Union[bytes, str]) -> Json:
        """Writes `data` to `path` (its directory must exist): its path, size and sha256."""
        content = data.encode() if isinstance(data, str) else data
        return self._cabin.request("PUT", f"{self._path}/files", params={"path": path},
                                   content=content,
                                   headers={"content-type": "application/octet-stream"})

    def read(self, path: str) -> bytes:
        return self._cabin.request("GET", f"{self._path}/files", params={"path": path}, raw=True)

    def list(self, dir: str) -> List[Json]:
        return self._cabin.request("GET", f"{self._path}/files", params={"dir": dir})["entries"]

    def remove(self, path: str) -> None:
        self._cabin.request("DELETE", f"{self._path}/files", params={"path": path})


class Previews:
    def __init__(self, cabin: Cabin, path: str) -> None:
        self._cabin = cabin
        self._path = path

    def open(self, port: int, *, ttl_s: Optional[int] = None) -> Json:
        """Opens `port` of the sandbox to the outside: a short-lived URL with its access."""
        body: Json = {"port": port}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return self._cabin.request("POST", f"{self._path}/previews", json=body)

    def list(self) -> List[Json]:
        return self._cabin.request("GET", f"{self._path}/previews")["previews"]

    def delete(self, preview_id: str) -> None:
        self._cabin.request("DELETE", f"{self._path}/previews/{preview_id}")


class AsyncCabin:
    """The asynchronous client: `async with AsyncCabin() as cabin:`."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 max_retries: int = 2, max_retry_wait_s: float = 60, timeout_s: float = 300,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self._config = _Config(base_url, api_key, max_retries, max_retry_wait_s, timeout_s)
        self._http = httpx.AsyncClient(base_url=self._config.base_url,
                                       headers=self._config.headers, timeout=timeout_s,
                                       transport=transport)
        self.sessions = AsyncSessions(self)

    async def __aenter__(self) -> "AsyncCabin":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, *, json: Any = None,
                      params: Optional[Json] = None, headers: Optional[Dict[str, str]] = None,
                      raw: bool = False, content: Optional[bytes] = None) -> Any:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        attempt = 0
        while True:
            try:
                res = await self._http.request(method, path, json=json, params=params,
                                               headers=headers, content=content)
            except httpx.TransportError as err:
                raise APIConnectionError(f"{method} {path}: {err}") from err
            if res.status_code < 400:
                if raw:
                    return res.content
                return res.json() if res.content else None
            wait = self._config.should_retry(res, attempt)
            if wait is None:
                raise _error(res, _retry_after(res))
            await asyncio.sleep(wait)
            attempt += 1


class AsyncSessions:
    def __init__(self, cabin: AsyncCabin) -> None:
        self._cabin = cabin

    async def create(self, spec: Optional[Json] = None, *, idempotency_key: Optional[str] = None,
                     **fields: Any) -> "AsyncSession":
        body = {**(spec or {}), **fields}
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        return AsyncSession(self._cabin, await self._cabin.request("POST", "/v1/sessions",
                                                                   json=body, headers=headers))

    async def list(self, *, all: bool = False) -> List[Json]:
        r = await self._cabin.request("GET", "/v1/sessions", params={"all": 1 if all else None})
        return r["sessions"]

    async def get(self, session_id: str) -> "AsyncSession":
        return AsyncSession(self._cabin, await self._cabin.request("GET", f"/v1/sessions/{session_id}"))

    async def delete(self, session_id: str) -> Json:
        return await self._cabin.request("DELETE", f"/v1/sessions/{session_id}")


class AsyncSession(_SessionRecord):
    """The async twin of Session: `async with await cabin.sessions.create() as s:`."""

    def __init__(self, cabin: AsyncCabin, info: Json) -> None:
        super().__init__(info)
        self._cabin = cabin
        self.previews = AsyncPreviews(cabin, self._path)
        self.files = AsyncFiles(cabin, self._path)

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except NotFoundError:
            pass

    async def refresh(self) -> Json:
        self.info = await self._cabin.request("GET", self._path)
        return self.info

    async def delete(self) -> Json:
        self.info = await self._cabin.request("DELETE", self._path)
        return self.info

    async def computer(self, actions: Union[Json, List[Json]]) -> Json:
        return await self._cabin.request("POST", f"{self._path}/computer",
                                         json=_computer_body(actions))

    async def screenshot(self, *, format: Optional[str] = None,
                         quality: Optional[int] = None) -> bytes:
        return await self._cabin.request("GET", f"{self._path}/screenshot",
                                         params={"format": format, "quality": quality}, raw=True)

    async def exec(self, command: Union[Sequence[str], Json], **fields: Any) -> Json:
        return await self._cabin.request("POST", f"{self._path}/exec",
                                         json={**_body(command), **fields})

    async def pause(self, mode: Optional[str] = None) -> Json:
        self.info = await self._cabin.request("POST", f"{self._path}/pause",
                                              json={"mode": mode} if mode else {})
        return self.info

    async def resume(self) -> Json:
        self.info = await self._cabin.request("POST", f"{self._path}/resume", json={})
        return self.info

    async def keepalive(self) -> Json:
        self.info = await self._cabin.request("POST", f"{self._path}/keepalive", json={})
        return self.info

    async def fork(self, count: int = 1) -> List["AsyncSession"]:
        r = await self._cabin.request("POST", f"{self._path}/fork", json={"count": count})
        return [AsyncSession(self._cabin, info) for info in r["sessions"]]

    async def token(self, scope: str, ttl_s: Optional[int] = None) -> Json:
        body: Json = {"scope": scope}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return await self._cabin.request("POST", f"{self._path}/tokens", json=body)

    async def downloads(self) -> List[Json]:
        return (await self._cabin.request("GET", f"{self._path}/downloads"))["downloads"]

    async def get_clipboard(self) -> str:
        return (await self._cabin.request("GET", f"{self._path}/clipboard"))["text"]

    async def set_clipboard(self, text: str) -> None:
        await self._cabin.request("PUT", f"{self._path}/clipboard", json={"text": text})

    async def take_control(self, ttl_s: Optional[int] = None) -> Json:
        body: Json = {"action": "take"}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return await self._cabin.request("POST", f"{self._path}/control", json=body)

    async def release_control(self) -> Json:
        return await self._cabin.request("POST", f"{self._path}/control",
                                         json={"action": "release"})

    async def events(self, *, since: Optional[int] = None) -> AsyncIterator[Json]:
        params = {"since": since} if since is not None else {}
        try:
            async with self._cabin._http.stream("GET", f"{self._path}/events", params=params,
                                                timeout=httpx.Timeout(None, connect=30)) as res:
                if res.status_code >= 400:
                    await res.aread()
                    raise _error(res, None)
                async for line in res.aiter_lines():
                    if line.startswith("data: "):
                        yield jsonlib.loads(line[6:])
        except httpx.TransportError as err:
            raise APIConnectionError(f"GET {self._path}/events: {err}") from err


class AsyncFiles:
    def __init__(self, cabin: AsyncCabin, path: str) -> None:
        self._cabin = cabin
        self._path = path

    async def write(self, path: str, data: Union[bytes, str]) -> Json:
        content = data.encode() if isinstance(data, str) else data
        return await self._cabin.request("PUT", f"{self._path}/files", params={"path": path},
                                         content=content,
                                         headers={"content-type": "application/octet-stream"})

    async def read(self, path: str) -> bytes:
        return await self._cabin.request("GET", f"{self._path}/files", params={"path": path},
                                         raw=True)

    async def list(self, dir: str) -> List[Json]:
        return (await self._cabin.request("GET", f"{self._path}/files",
                                          params={"dir": dir}))["entries"]

    async def remove(self, path: str) -> None:
        await self._cabin.request("DELETE", f"{self._path}/files", params={"path": path})


class AsyncPreviews:
    def __init__(self, cabin: AsyncCabin, path: str) -> None:
        self._cabin = cabin
        self._path = path

    async def open(self, port: int, *, ttl_s: Optional[int] = None) -> Json:
        body: Json = {"port": port}
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        return await self._cabin.request("POST", f"{self._path}/previews", json=body)

    async def list(self) -> List[Json]:
        return (await self._cabin.request("GET", f"{self._path}/previews"))["previews"]

    async def delete(self, preview_id: str) -> None:
        await self._cabin.request("DELETE", f"{self._path}/previews/{preview_id}")

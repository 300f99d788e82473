"""The Python SDK against a real cabind and real sandboxes, sync and async."""

import asyncio
import time

import httpx
import pytest

import cabin
from cabin import AsyncCabin, Cabin


def raw(server, method, path, **kw):
    return httpx.request(method, server.base + path,
                         headers={"authorization": f"Bearer {server.key}"}, **kw)


def test_with_block_deletes_the_session(server):
    with Cabin(server.base, server.key) as c:
        with c.sessions.create(resolution={"width": 1024, "height": 768}) as s:
            assert s.info["status"] == "running"
            assert s.cdp_url.startswith("ws://")
            assert s.exec(["echo", "hi"])["stdout"] == "hi\n"
            assert any(x["id"] == s.id for x in c.sessions.list())
        after = raw(server, "GET", f"/v1/sessions/{s.id}").json()
        assert after["status"] == "ended"
        assert after["end_reason"] == "deleted"


def test_exec_screenshot_computer_and_previews(server):
    with Cabin(server.base, server.key) as c, c.sessions.create() as s:
        r = s.exec({"argv": ["sh", "-c", "cat; exit 3"], "stdin": "piped"})
        assert (r["exit_code"], r["stdout"]) == (3, "piped")
        png = s.screenshot()
        assert png[:4] == b"\x89PNG"
        moved = s.computer([{"action": "mouse_move", "coordinate": [10, 20]},
                            {"action": "cursor_position"}])
        assert moved["results"][1]["x"] == 10 and moved["results"][1]["y"] == 20
        p = s.previews.open(8000, ttl_s=60)
        assert "cabin_token=" in p["url"]
        assert [x["id"] for x in s.previews.list()] == [p["id"]]
        s.previews.delete(p["id"])
        assert s.previews.list() == []
        assert "/live?token=" in s.token("view", 30)["live_view_url"]


def test_errors_are_typed(server):
    with Cabin(server.base, server.key) as c:
        with pytest.raises(cabin.BadRequestError) as e:
            c.sessions.create(resolution={"width": 1, "height": 1})
        assert e.value.status == 400 and e.value.code == "invalid_request"
        with pytest.raises(cabin.NotFoundError) as e:
            c.sessions.get("ses_00000000000000000000")
        assert e.value.code == "session_not_found"
    with Cabin(server.base, "not-the-key") as bad, pytest.raises(cabin.AuthenticationError):
        bad.sessions.list()


def test_a_429_is_retried_after_retry_after(server):
    key = raw(server, "POST", "/v1/keys",
              json={"name": "py-retry", "max_sessions": 1, "max_creates_per_minute": 10}).json()
    attempts = []

    def count(request):
        attempts.append(request.url.path)

    with Cabin(server.base, key["key"], max_retries=0) as once, \
            Cabin(server.base, key["key"]) as tenant:
        first = tenant.sessions.create(timeout_s=3)  # ends by itself: the quota's Retry-After
        with pytest.raises(cabin.RateLimitError) as e:
            once.sessions.create()
        assert e.value.code == "quota_sessions"
        assert 1 <= e.value.retry_after_s <= 3
        tenant._http.event_hooks["request"] = [count]
        started = time.monotonic()
        with tenant.sessions.create() as second:
            assert len(attempts) >= 2, attempts
            assert time.monotonic() - started >= 1
            assert second.id != first.id


def test_async_client(server):
    async def run():
        async with AsyncCabin(server.base, server.key) as c:
            async with await c.sessions.create() as s:
                r = await s.exec(["sh", "-c", "echo async"])
                assert r["stdout"] == "async\n"
                assert (await s.screenshot())[:4] == b"\x89PNG"
                assert any(x["id"] == s.id for x in await c.sessions.list())
            with pytest.raises(cabin.NotFoundError):
                await c.sessions.get("ses_00000000000000000000")
            return s.id

    sid = asyncio.run(run())
    assert raw(server, "GET", f"/v1/sessions/{sid}").json()["status"] == "ended"


def test_files_clipboard_control_and_events(server):
    with Cabin(server.base, server.key) as c, c.sessions.create() as s:
        stored = s.files.write("/tmp/py.bin", b"\x00\x01 bytes")
        assert stored["size"] == 8 and len(stored["sha256"]) == 64
        assert s.files.read("/tmp/py.bin") == b"\x00\x01 bytes"
        assert any(e["name"] == "py.bin" for e in s.files.list("/tmp"))
        s.files.remove("/tmp/py.bin")
        with pytest.raises(cabin.NotFoundError) as gone:
            s.files.read("/tmp/py.bin")
        assert gone.value.code == "file_not_found"
        assert s.downloads() == []
        s.set_clipboard("Grüße 🙂")
        assert s.get_clipboard() == "Grüße 🙂"
        assert s.take_control(60)["holder"] == "admin"
        with pytest.raises(cabin.ConflictError) as refused:
            s.computer({"action": "mouse_move", "coordinate": [5, 5]})
        assert refused.value.code == "human_in_control"
        assert s.release_control()["held"] is False
        types = []
        for e in s.events(since=0):
            types.append(e["type"])
            if e["type"] == "control_released":
                break
        assert [t for t in types if t.startswith("control_")] == ["control_taken",
                                                                   "control_released"]

    async def run():
        async with AsyncCabin(server.base, server.key) as ac:
            async with await ac.sessions.create() as a:
                await a.files.write("/tmp/a.txt", "async")
                assert await a.files.read("/tmp/a.txt") == b"async"
                await a.take_control()
                await a.release_control()
                seen = []
                async for e in a.events(since=0):
                    seen.append(e["type"])
                    if e["type"] == "control_released":
                        break
                assert "control_taken" in seen

    asyncio.run(run())

"""How the ASGI middlewares hold an application's run (_AppRun), without a
database: its response is the result, what it raised is raised, its end
without a response is an error, its time limit gives OVERTIME, and what
it does after its response waits until the response was sent."""
import asyncio

import pytest

from pg_idempotency_key.asgi import OVERTIME, _AppRun


async def answers(scope, receive, send):
    await send({"type": "http.response.start", "status": 201, "headers": [(b"X-Order", b"7")]})
    await send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await send({"type": "http.response.body", "body": b"c"})
    scope["after"] = "ran"  # a background task: only once the response was sent


async def turns(n=20):
    """n turns of the event loop (not a time): what is ready to run has run"""
    for _ in range(n):
        await asyncio.sleep(0)


def within(main):
    """main() run to its end, or a failure after 30 s (a run that never ends)"""
    return asyncio.run(asyncio.wait_for(main(), 30))


def run(app, timeout=None):
    async def main():
        r = _AppRun(app, {}, b"", 1000)
        try:
            return await r.result(timeout), r
        finally:
            if not r.task.done():
                await r.abandon()
    return within(main)


def test_the_response_is_the_result_and_what_follows_it_waits_for_release():
    async def main():
        scope = {}
        r = _AppRun(answers, scope, b"", 1000)
        response = await r.result()
        assert (response.status, response.headers, response.body) == (201, [("x-order", "7")], b"abc")
        await turns()
        assert "after" not in scope and not r.task.done()
        await r.release()
        assert scope["after"] == "ran"
    within(main)


def test_what_the_application_raised_is_raised():
    async def fails(scope, receive, send):
        raise ValueError("the handler failed")
    with pytest.raises(ValueError, match="the handler failed"):
        run(fails)


def test_an_application_that_returns_without_a_response_is_an_error():
    async def silent(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
    with pytest.raises(RuntimeError, match="returned without a response"):
        run(silent)


def test_past_its_time_limit_the_run_is_overtime_and_abandon_cancels_it():
    cancelled = []

    async def hangs(scope, receive, send):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
    response, r = run(hangs, timeout=0.05)
    assert response is OVERTIME and cancelled == [True] and r.task.cancelled()


def test_an_answer_within_the_time_limit_is_not_overtime():
    response, _ = run(answers, timeout=60)
    assert response.status == 201


def test_a_send_after_the_response_ended_is_refused():
    refused = []

    async def twice(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x"})
        try:
            await send({"type": "http.response.body", "body": b"y"})
        except RuntimeError as exc:
            refused.append(str(exc))

    async def main():
        r = _AppRun(twice, {}, b"", 1000)
        assert (await r.result()).body == b"x"
        await r.release()
        assert refused == ["the application sent after its response ended"]
    within(main)


def test_a_cancelled_request_abandons_the_run():
    async def main():
        r = _AppRun(lambda scope, receive, send: asyncio.sleep(60), {}, b"", 1000)
        waiting = asyncio.ensure_future(r.result())
        await turns()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await r.abandon()
        assert r.task.cancelled()
    within(main)

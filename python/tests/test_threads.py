"""Buffers and contexts closed on one thread while calls on other threads use
them: the release waits for the calls, and every call either computes the
right values or reports the closed buffer."""

import threading

import numpy as np

import bufkern

ROUNDS = 200
WORKERS = 4


def test_close_during_calls_is_deferred():
    x = np.arange(4096.0).reshape(64, 64) / 4096.0
    expected = x.sum(-1)
    for _ in range(ROUNDS // 20):
        b = bufkern.from_numpy(x)
        start = threading.Barrier(WORKERS + 1)
        outcomes = []

        def work():
            start.wait()
            for _ in range(20):
                try:
                    got = bufkern.rows_sum(b).numpy()
                except ValueError as exc:
                    assert "closed" in str(exc)
                    outcomes.append("closed")
                    return
                np.testing.assert_allclose(got, expected, rtol=1e-12)
                outcomes.append("ok")

        threads = [threading.Thread(target=work) for _ in range(WORKERS)]
        for t in threads:
            t.start()
        start.wait()
        b.close()
        for t in threads:
            t.join()
        assert b.closed and outcomes
        assert set(outcomes) <= {"ok", "closed"}


def test_close_of_a_held_buffer_releases_after_the_call():
    b = bufkern.from_numpy(np.ones(8))
    bufkern._core.hold([b], ["x"], "test")
    b.close()  # deferred: the handle is still in use
    assert b.closed and b._doomed is not None
    bufkern._core.unhold([b])
    assert b._doomed is None


def test_contexts_and_buffers_across_threads():
    # Buffers made on one thread, read by many, released on others; contexts
    # created, used and closed concurrently.
    shared = [bufkern.from_numpy(np.full((8, 16), float(i))) for i in range(WORKERS)]
    errors = []
    done_reading = threading.Barrier(WORKERS)

    def work(i):
        try:
            for r in range(ROUNDS // 4):
                with bufkern.Context("cpu") as c:
                    y = bufkern.rows_max(shared[(i + r) % WORKERS], ctx=c)
                    assert y.numpy().tolist() == [float((i + r) % WORKERS)] * 8
            done_reading.wait()
            shared[i].close()
        except BaseException as exc:  # reported below, on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(b.closed for b in shared)

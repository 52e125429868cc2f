"""DiskStore's group commit in durable mode: overlapping sync rounds, answered in order.

The jobs a round runs are swapped for a gate the test opens, so the order in which rounds
end is the test's choice; the queue is a real disk queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for

from nsqpy.nsqd.storage import persistence
from nsqpy.nsqd.storage.diskqueue import DiskQueue, SyncJob


class Gates:
    """Stands in for ``persistence._run_jobs``: round n runs its jobs once gate n opens and
    then reports ``errors[n]``."""

    def __init__(self) -> None:
        self.gates = [threading.Event() for _ in range(4)]
        self.errors: list[list[Exception]] = [[] for _ in range(4)]
        self.started = 0
        self.finished: list[int] = []
        self.lock = threading.Lock()

    def run(self, jobs: list[SyncJob]) -> list[Exception]:
        with self.lock:
            n = self.started
            self.started += 1
        assert self.gates[n].wait(10)
        for job in jobs:
            job.run()
        with self.lock:
            self.finished.append(n)
        return self.errors[n]


@pytest.fixture
def gates(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gates]:
    g = Gates()
    monkeypatch.setattr(persistence, "_run_jobs", g.run)
    yield g
    for gate in g.gates:
        gate.set()


async def start(tmp_path: Path) -> tuple[persistence.DiskStore, DiskQueue, list[str]]:
    store = persistence.DiskStore(
        asyncio.get_running_loop(),
        str(tmp_path),
        max_bytes_per_file=1 << 20,
        max_msg_size=1024,
        sync_every=1000,
        sync_timeout=60.0,
        durable=True,
        set_health=lambda _: None,
    )
    return store, store.open_queue("t"), []


def publish(store: persistence.DiskStore, queue: DiskQueue, answers: list[str], name: str) -> None:
    """What a durable publish does: write, report it, wait for the commit."""
    queue.put([name.encode().ljust(40, b".")])
    store.wrote(queue)
    store.after_commit(lambda ok: answers.append(f"{name}:{ok}"))


async def test_a_publish_does_not_wait_for_the_round_under_way(
    tmp_path: Path, gates: Gates
) -> None:
    store, queue, answers = await start(tmp_path)
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")  # round 1 still runs: b gets a round of its own
    await wait_for(lambda: gates.started == 2)
    gates.gates[1].set()
    await wait_for(lambda: store._rounds[-1].done)  # the loop has seen b's round end
    assert answers == []  # but a is answered first
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    assert answers == ["a:True", "b:True"]
    await store.close([queue])


async def test_a_failed_round_fails_the_rounds_that_started_while_it_ran(
    tmp_path: Path, gates: Gates
) -> None:
    store, queue, answers = await start(tmp_path)
    gates.errors[0] = [OSError("no space left on device")]
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")
    await wait_for(lambda: gates.started == 2)
    gates.gates[1].set()  # b's own fsync worked, but a's round may have held what b needs
    await wait_for(lambda: gates.finished == [1])
    gates.gates[0].set()
    await wait_for(lambda: len(answers) == 2)
    assert answers == ["a:False", "b:False"]
    gates.gates[2].set()
    publish(store, queue, answers, "c")  # a round started after the failure is on its own
    await wait_for(lambda: len(answers) == 3)
    assert answers[2] == "c:True"
    await store.close([queue])


async def test_close_waits_for_every_round_under_way(tmp_path: Path, gates: Gates) -> None:
    store, queue, answers = await start(tmp_path)
    publish(store, queue, answers, "a")
    await wait_for(lambda: gates.started == 1)
    publish(store, queue, answers, "b")
    await wait_for(lambda: gates.started == 2)
    closing = asyncio.ensure_future(store.close([queue]))
    gates.gates[1].set()
    await wait_for(lambda: store._rounds[-1].done)
    assert not closing.done()
    gates.gates[0].set()
    await closing
    assert answers == ["a:True", "b:True"]

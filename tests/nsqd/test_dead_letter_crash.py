"""Dead-lettering under load in ``--durable`` mode while nsqd keeps being SIGKILLed.

One message in ten is poison: the consumer REQs it every time, so nsqd moves it to the
dead-letter topic after ``max_attempts``; a second consumer FINs the dead-letter topic. Every
acknowledged message must end up finished, on its channel or as a letter: a kill in the
middle of a move may duplicate a letter, never lose one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from nsqd_process import NsqdProcess
from test_crash import CrashLoop, create_channel, find, started

daemons = started  # the same fixture under this module's name for it

MAX_ATTEMPTS = 2


def poison(body: bytes) -> bool:
    return body.endswith(b"0")  # b"p<producer>-<seq>": one in ten


class DeadLetterCrashLoop(CrashLoop):
    DEAD = f"{CrashLoop.TOPIC}.dead"

    def __init__(self, data_path: Path, flags: tuple[str, ...], daemons: list[NsqdProcess]):
        super().__init__(data_path, flags, daemons)
        self.rdy = 5  # requeues keep a slow consumer busier than the base loop's
        self.letters: Counter[bytes] = Counter()
        self.poison_finished = 0

    async def setup(self, daemon: NsqdProcess) -> None:
        await create_channel(daemon, self.TOPIC, self.CHANNEL)
        await create_channel(daemon, self.DEAD, "inspect")
        settings = json.dumps({"max_attempts": MAX_ATTEMPTS}).encode()
        url = f"{daemon.http}/channel/config?topic={self.TOPIC}&channel={self.CHANNEL}"
        async with aiohttp.ClientSession() as http, http.post(url, data=settings) as resp:
            assert resp.status == 200, await resp.text()

    def queues(self) -> list[tuple[str, str]]:
        return [(self.TOPIC, self.CHANNEL), (self.DEAD, "inspect")]

    def settled(self, stats: dict[str, Any]) -> bool:
        """Every letter the channel diverted has reached the dead-letter topic. Between the
        two (until the end of the loop turn that diverted it) a letter is in no depth and no
        in-flight count, and a drain that ended there counted it as lost (CI, 2026-11-26:
        the last 8 letters). Both counters start again at each restart."""
        topic = find(stats["topics"], "topic_name", self.TOPIC)
        diverted = find(topic["channels"], "channel_name", self.CHANNEL)["dead_letter_count"]
        dead = [t for t in stats["topics"] if t["topic_name"] == self.DEAD]
        return diverted == (dead[0]["message_count"] if dead else 0)

    def answer(self, topic: str, msg_id: str, body: bytes) -> str:
        if topic == self.DEAD:
            self.letters[body] += 1
        elif poison(body):
            return f"REQ {msg_id} 0"
        return super().answer(topic, msg_id, body)


async def channel_config(daemon: NsqdProcess, topic: str, channel: str) -> dict[str, object]:
    url = f"{daemon.http}/channel/config?topic={topic}&channel={channel}"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        doc: dict[str, object] = json.loads(await resp.text())
        return doc


async def test_durable_dead_letters_lose_no_acknowledged_message_across_kills(
    tmp_path: Path, daemons: list[NsqdProcess], record_property: Callable[[str, object], None]
) -> None:
    loop = DeadLetterCrashLoop(tmp_path / "data", ("--durable",), daemons)
    await loop.run(kills=3, seed=20261124)
    lost, _ = loop.report(record_property, "durable_dead_letters")
    poisoned = {body for body in loop.acked if poison(body)}
    assert poisoned and len(loop.acked) > len(poisoned)
    assert lost == 0, sorted(loop.acked - set(loop.consumed))[:20]
    # every poison message became a letter, and only poison did (a batch taken but not
    # acknowledged before a kill may add letters of its own)
    assert poisoned <= set(loop.letters)
    assert all(poison(body) for body in loop.letters)

    # the setting came through every kill
    daemon = await NsqdProcess.start(tmp_path / "data", "--durable")
    daemons.append(daemon)
    config = await channel_config(daemon, loop.TOPIC, loop.CHANNEL)
    assert config["max_attempts"] == MAX_ATTEMPTS
    assert await daemon.stop() == 0, daemon.log

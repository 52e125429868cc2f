"""PUB and SUB rates over TLS and with snappy/deflate, with nsqpy's client against a real nsqd.

    python -m benchmarks.bench_secure [--count 200000] [--size 200] [--batch 100]

Starts ``python -m nsqpy.nsqd`` with a throwaway certificate (needs ``cryptography``), then for
each transport (plain, tls, snappy, deflate, tls+snappy) publishes ``count`` messages in MPUBs
of ``batch`` and consumes them with one consumer (max_in_flight 2500); prints msgs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nsqpy.client import Config, Consumer, Producer

_LISTEN = re.compile(r"TCP: listening on (\S+)")
_ROOT = str(Path(__file__).resolve().parent.parent)


def start_nsqd(tmp: Path, certs: Any) -> tuple[subprocess.Popen[str], str]:
    cmd = [
        sys.executable, "-m", "nsqpy.nsqd", "--tcp-address=127.0.0.1:0",
        "--http-address=", f"--data-path={tmp / 'data'}", "--mem-queue-size=1000000",
        f"--tls-cert={certs.server_cert}", f"--tls-key={certs.server_key}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        match = _LISTEN.search(line)
        if match:
            return proc, match.group(1)
    raise RuntimeError("nsqd did not start")


async def one(address: str, config: Config, topic: str, args: argparse.Namespace) -> Any:
    body = b"x" * args.size
    batch = [body] * args.batch
    t0 = time.perf_counter()
    async with Producer(address, config=config) as producer:
        pending = []
        for _ in range(args.count // args.batch):
            pending.append(producer.multi_publish(topic, batch))
            if len(pending) >= 16:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    pub_s = time.perf_counter() - t0
    got = 0
    t0 = time.perf_counter()
    async with Consumer(
        topic, "c", nsqd_tcp_addresses=address, config=config, max_in_flight=2500
    ) as consumer:
        async for msg in consumer:
            msg.finish()
            got += 1
            if got >= args.count:
                break
    sub_s = time.perf_counter() - t0
    return args.count / pub_s, args.count / sub_s


async def main(args: argparse.Namespace) -> None:
    sys.path.insert(0, _ROOT)
    from tests.tls_certs import make_certs

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        certs = make_certs(tmp / "certs")
        proc, address = start_nsqd(tmp, certs)
        try:
            modes = {
                "plain": {},
                "tls": {"tls_v1": True},
                "snappy": {"snappy": True},
                "deflate": {"deflate": True, "deflate_level": 1},
                "tls+snappy": {"tls_v1": True, "snappy": True},
            }
            print(f"count={args.count} size={args.size} batch={args.batch}")
            print(f"{'mode':<12} {'pub msg/s':>12} {'sub msg/s':>12}")
            for name, opts in modes.items():
                config = Config(tls_root_ca_file=str(certs.ca), **opts)  # type: ignore[arg-type]
                topic = f"bench_{name.replace('+', '_')}_{int(time.time())}"
                pub, sub = await one(address, config, topic, args)
                print(f"{name:<12} {pub:>12,.0f} {sub:>12,.0f}", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    asyncio.run(main(parser.parse_args()))

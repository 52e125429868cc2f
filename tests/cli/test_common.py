"""The utilities' shared pieces (nsqpy.cli.common): flags, checks, fatal exits, the loop."""

from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest

from cli.conftest import GO_LOG_PREFIX
from nsqpy._internal.goflag import FlagError
from nsqpy._version import __version__
from nsqpy.cli import common
from nsqpy.client import Config


def flags(*, checked: bool = True) -> common.FlagSet:
    fs = common.new_flag_set("nsq_x", [])
    common.add_version_flag(fs)
    common.add_source_flags(fs)
    common.add_config_opt(fs, "consumer-opt", common.CONSUMER_OPT_USAGE, checked=checked)
    return fs


def test_identity() -> None:
    assert common.user_agent("nsq_tail") == f"nsq_tail/1.3.0 nsqpy/{__version__}"
    assert common.version_text("nsq_stat") == "nsq_stat v1.3.0"


def test_flag_set_named_after_the_app_when_argv_is_given() -> None:
    assert flags().name == "nsq_x"
    assert "Usage of nsq_x:\n" in flags().usage()


def test_source_flags_repeat_without_comma_splitting() -> None:
    parsed = flags().parse_args(
        ["--nsqd-tcp-address=a:1,b:2", "-nsqd-tcp-address", "c:3", "--lookupd-http-address=l:1"]
    )
    assert common.strings(parsed, "nsqd-tcp-address") == ["a:1,b:2", "c:3"]
    assert common.strings(parsed, "lookupd-http-address") == ["l:1"]


@pytest.mark.parametrize(
    ("nsqd", "lookupd", "message"),
    [
        ([], [], "--nsqd-tcp-address or --lookupd-http-address required"),
        (["a:1"], ["b:2"], "use --nsqd-tcp-address or --lookupd-http-address not both"),
        (["a:1"], [], None),
        ([], ["b:2"], None),
    ],
)
def test_source_error(nsqd: list[str], lookupd: list[str], message: str | None) -> None:
    assert common.source_error(nsqd, lookupd) == message


def test_source_error_with_other_flag_names() -> None:
    assert common.source_error([], [], nsqd_flag="--nsqd-http-address") == (
        "--nsqd-http-address or --lookupd-http-address required"
    )


def test_config_opts_go_through_to_the_client_config() -> None:
    parsed = flags().parse_args(
        [
            "--consumer-opt=max_attempts,10",
            "--consumer-opt",
            "snappy",
            "--consumer-opt=max-backoff-duration,3s",
        ]
    )
    opts = common.strings(parsed, "consumer-opt")
    assert opts == ["max_attempts,10", "snappy", "max-backoff-duration,3s"]
    cfg = Config()
    common.apply_config_opts(cfg, opts)
    assert (cfg.max_attempts, cfg.snappy, cfg.max_backoff_duration) == (10, True, 3.0)


def test_a_bad_config_opt_is_a_usage_error() -> None:
    with pytest.raises(FlagError) as err:
        flags().parse_args(["--consumer-opt=nope,1"])
    assert str(err.value) == 'invalid value "nope,1" for flag -consumer-opt: invalid option nope'
    with pytest.raises(FlagError, match="-consumer-opt"):
        flags().parse_args(["--consumer-opt=max_attempts,many"])


def test_unchecked_config_opts_are_skipped_when_bad() -> None:
    parsed = flags(checked=False).parse_args(
        ["--consumer-opt=nope,1", "--consumer-opt=max_attempts,7"]
    )
    cfg = Config()
    common.apply_config_opts(cfg, common.strings(parsed, "consumer-opt"), strict=False)
    assert cfg.max_attempts == 7
    with pytest.raises(ValueError, match="invalid option nope"):
        common.apply_config_opts(Config(), ["nope,1"])


def test_client_config_lets_the_app_settings_win() -> None:
    cfg = common.client_config(
        "nsq_tail", ["user_agent,mine", "max_in_flight,5", "max_attempts,2"], max_in_flight=9
    )
    assert cfg.user_agent == common.user_agent("nsq_tail")
    assert (cfg.max_in_flight, cfg.max_attempts) == (9, 2)
    assert common.client_config("to_nsq", ["max_in_flight,5"]).max_in_flight == 5


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert not common.handle_version(flags().parse_args([]), "nsq_x")
    assert common.handle_version(flags().parse_args(["--version"]), "nsq_x")
    assert capsys.readouterr().out == "nsq_x v1.3.0\n"


def test_fatal_is_one_go_log_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        common.fatal("--topic required")
    assert exit_.value.code == 1
    assert re.fullmatch(GO_LOG_PREFIX + "--topic required\n", capsys.readouterr().err)


def test_run_returns_mains_status() -> None:
    async def main(shutdown: common.Shutdown) -> int:
        return 3

    async def quiet(shutdown: common.Shutdown) -> None:
        return None

    assert common.run(main) == 3
    assert common.run(quiet) == 0


def test_run_reports_fatal_errors(capsys: pytest.CaptureFixture[str]) -> None:
    async def raises(shutdown: common.Shutdown) -> int:
        raise common.Fatal("ERROR: it broke")

    async def fails(shutdown: common.Shutdown) -> int:
        shutdown.fail("first")
        shutdown.fail("second")  # the first failure is the one reported
        await shutdown.wait()
        return 0

    assert common.run(raises) == 1
    assert re.fullmatch(GO_LOG_PREFIX + "ERROR: it broke\n", capsys.readouterr().err)
    assert common.run(fails) == 1
    assert re.fullmatch(GO_LOG_PREFIX + "first\n", capsys.readouterr().err)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_stops_cleanly_on_a_signal(sig: signal.Signals) -> None:
    seen: list[bool] = []

    async def main(shutdown: common.Shutdown) -> int:
        os.kill(os.getpid(), sig)
        await shutdown.wait()
        seen.append(shutdown.signalled)
        return 0

    assert common.run(main) == 0
    assert seen == [True]


async def test_until_shutdown_returns_the_work_result() -> None:
    async def work() -> str:
        return "done"

    assert await common.until_shutdown(common.Shutdown(), work()) == "done"


async def test_until_shutdown_cancels_the_work_and_lets_it_clean_up() -> None:
    shutdown = common.Shutdown()
    cleaned = asyncio.Event()

    async def work() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            # cleanup may wait for the loop (closing connections, say)
            loop = asyncio.get_running_loop()
            tick = loop.create_future()
            loop.call_soon(tick.set_result, None)
            await tick
            cleaned.set()
        return "never"

    asyncio.get_running_loop().call_soon(shutdown.request)
    assert await common.until_shutdown(shutdown, work()) is None
    assert cleaned.is_set()
    assert shutdown.requested and not shutdown.signalled


async def test_until_shutdown_propagates_the_work_error() -> None:
    async def work() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await common.until_shutdown(common.Shutdown(), work())

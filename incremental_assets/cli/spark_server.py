"""``incremental-assets spark start|stop|status``: the project's long-lived local Spark Connect server."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

from incremental_assets.model.settings import redact_url


def _settings(args: argparse.Namespace):
    from incremental_assets.load.settings import load_settings

    return load_settings(args.project)


def _configured_remote_note(settings) -> str | None:
    if settings.spark_remote:
        return (
            f"note: spark.remote is set ({redact_url(settings.spark_remote)}): commands and runs of this project use "
            "that server, not this one"
        )
    return None


def cmd_spark_start(args: argparse.Namespace) -> int:
    """Start the project's Spark Connect server (or say it already runs)."""
    from incremental_assets.cli.spark_warm_up import warm_up_with_models
    from incremental_assets.spark.connect_server import start_server, state_dir, warm_up

    settings = _settings(args)
    record, started = start_server(settings, timeout=args.timeout)
    verb = "started" if started else "already running"
    print(
        f"Spark Connect server {verb}: {record.url} (pid {record.pid}, {record.master}); log: {record.log}", flush=True
    )
    if started and not args.no_warm_up:
        try:
            warm_up(record.url)
        except Exception as error:  # noqa: BLE001 - the warm-up only saves time; it never fails `spark start`
            print(f"warm-up skipped: the server did not answer a small query ({str(error).splitlines()[0]})")
        else:
            projects = list(getattr(args, "projects", None) or [args.project])
            print(warm_up_with_models(projects, state_dir(settings), record.url, days=args.warm_up_days).line())
    print(_command_server_line(args, record.pid, state_dir(settings)), flush=True)
    print("commands and Dagster runs of this project now use it; stop it with `incremental-assets spark stop`")
    note = _configured_remote_note(settings)
    if note:
        print(note)
    return 0


def _command_server_line(args: argparse.Namespace, spark_pid: int, state: Path) -> str:
    """Start (or keep) the command server that runs this project's commands with the libraries imported."""
    from incremental_assets.cli.command_server import LOG_FILE, start, stop

    if getattr(args, "no_command_server", False):
        stopped = stop(state)
        return "command server: off (--no-command-server)" + (f", pid {stopped} stopped" if stopped else "")
    pid = start(Path(args.project).resolve(), spark_pid, state)
    if pid is None:
        return f"command server: did not start (see {state / LOG_FILE}); commands import on their own"
    return f"command server: pid {pid}; commands start with their libraries imported"


def cmd_spark_stop(args: argparse.Namespace) -> int:
    """Stop the project's Spark Connect server."""
    from incremental_assets.cli.command_server import stop
    from incremental_assets.spark.connect_server import state_dir, stop_server

    settings = _settings(args)
    record = stop_server(settings, timeout=args.timeout)
    stop(state_dir(settings))  # it ends with the server anyway; this waits for it
    print(
        f"Spark Connect server stopped (pid {record.pid})"
        if record
        else "no Spark Connect server running for this project"
    )
    return 0


def cmd_spark_status(args: argparse.Namespace) -> int:
    """Exit code 0 when the server is up, 1 when it is down (for scripts)."""
    from incremental_assets.spark.connect_server import server_status

    settings = _settings(args)
    status = server_status(settings)
    record = status.record
    if args.json:
        info = {
            "up": status.up,
            "url": record.url if status.up and record else None,
            "pid": record.pid if status.up and record else None,
            "configured_remote": redact_url(settings.spark_remote),
        }
        print(json.dumps(info))
        return 0 if status.up else 1
    if status.up and record:
        print(f"up: {record.url} (pid {record.pid}, {record.master}, since {record.started_at}); log: {record.log}")
    elif status.foreign and record:
        print(f"down: the state folder records the server of another project ({record.project_dir}, pid {record.pid})")
    elif record and not status.stale:
        print(f"down: pid {record.pid} is running but not answering on port {record.port}; see {record.log}")
    else:
        print(
            "down"
            + (f" (the server last started, pid {record.pid}, is no longer running)" if record else "")
            + ": commands start an in-process Spark; `incremental-assets spark start` starts a shared one"
        )
    note = _configured_remote_note(settings)
    if note:
        print(note)
    return 0 if status.up else 1


def add_spark_command(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The ``spark`` command and its three actions, added with ``add`` (which gives each ``--project``)."""
    spark = add("spark", "a long-lived local Spark Connect server this project's commands and Dagster runs share")
    actions = spark.add_subparsers(dest="action", required=True)
    for name, func, help_text in (
        ("start", cmd_spark_start, "start the server in the background (no-op when it is up)"),
        ("stop", cmd_spark_stop, "stop the server (by its recorded PID)"),
        ("status", cmd_spark_status, "up or down, its URL and PID; exit code 1 when down"),
    ):
        p = actions.add_parser(name, help=help_text, description=help_text)
        p.add_argument(
            "--project",
            action="append",
            default=argparse.SUPPRESS,
            type=Path,
            help="project folder; default: the current directory (of several, the first's server)",
        )
        if name == "status":
            p.add_argument("--json", action="store_true")
        else:
            p.add_argument("--timeout", type=float, default=180.0 if name == "start" else 30.0, help="seconds to wait")
        if name == "start":
            p.add_argument(
                "--no-warm-up",
                action="store_true",
                help="skip the warm-up (the project's incremental SQL models over their first days, into a scratch "
                "warehouse that is then deleted) that spares the first large query the JVM's compiling",
            )
            p.add_argument(
                "--no-command-server",
                action="store_true",
                help="do not keep a process with the command's libraries imported (commands then import them "
                "each time: 1.5-3 s more per command)",
            )
            p.add_argument(
                "--warm-up-days",
                type=int,
                default=7,
                metavar="N",
                help="days the warm-up runs the models over, from their earliest start (default: 7)",
            )
        p.set_defaults(func=func)

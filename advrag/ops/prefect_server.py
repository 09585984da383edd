"""The Prefect server `advrag ui` and `advrag schedule` start: Prefect's own app, answering only
its Host names.

    python -m advrag.ops.prefect_server --host 127.0.0.1 --port 4200 [--allowed-host NAME]

``prefect server start`` serves ``prefect.server.api.server.create_app`` with uvicorn and
answers any Host, so a page from a name that resolves to 127.0.0.1 (DNS rebinding) is
same-origin to the browser: its CSRF token request and its flow-creating POST both passed.
This runs the same app, with the same settings (``PREFECT_*`` from the environment, the UI and
the background services included), inside ``common.hosts.HostChecked``: any other Host is a
403 before Prefect sees the request. The credential (``PREFECT_SERVER_API_AUTH_STRING``,
``scheduling.project_credential``) comes from the environment, as for ``prefect server``.
"""

from __future__ import annotations

import argparse

from advrag.common.hosts import HostChecked, allowed_hosts


def host_checked_app(hosts: tuple[str, ...]):
    """Prefect's server app (UI, API and services, as ``prefect server start`` builds it),
    answering only ``hosts``."""
    from prefect.server.api.server import create_app

    return HostChecked(create_app(final=True), allowed=hosts)


def main(argv: list[str] | None = None) -> None:
    """Serve Prefect on ``--host``/``--port`` until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4200)
    parser.add_argument("--allowed-host", action="append", default=[], dest="allowed_hosts",
                        help="a Host name answered besides the loopback names (repeatable)")
    args = parser.parse_args(argv)
    try:
        hosts = allowed_hosts(args.host, args.allowed_hosts)
    except ValueError as error:
        parser.error(str(error))
    import uvicorn
    from prefect.settings import get_current_settings

    api = get_current_settings().server.api
    uvicorn.run(host_checked_app(hosts), host=args.host, port=args.port,
                timeout_keep_alive=api.keepalive_timeout,
                ws_ping_interval=api.websocket_ping_interval,
                ws_ping_timeout=api.websocket_ping_timeout,
                log_level=get_current_settings().server.logging_level.lower())


if __name__ == "__main__":
    main()

"""MkDocs hook (``mkdocs.yml``'s ``hooks``): `make docs`' server answers only its Host names.

``mkdocs serve`` answers any Host, so a page from a name that resolves to 127.0.0.1 (DNS
rebinding) could read the site it serves, drafts included. Its ``on_serve`` event hands us
the server before it starts: its app is wrapped in ``common.hosts.host_checked_wsgi`` with the
loopback names and the address it is bound to (``dev_addr``). MkDocs sends that event only to
a live-reloading server, which is how `make docs` runs it (``--no-livereload`` would serve
unchecked).
"""

from __future__ import annotations

from advrag.common.hosts import allowed_hosts, host_checked_wsgi


def on_serve(server, config, builder):
    """Wrap the docs server's WSGI app in the Host check (MkDocs' ``serve`` event)."""
    hosts = allowed_hosts(config["dev_addr"].host)
    server.set_app(host_checked_wsgi(server.get_app(), hosts))
    return server

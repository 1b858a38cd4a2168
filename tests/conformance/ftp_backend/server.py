"""The test server: pyftpdlib on 127.0.0.1 in a thread, with faults put at FTP requests.

``with ftp_server(root) as srv``: ``srv.endpoint`` is ``HOST:PORT``; ``srv.log`` lists every
command line the server received (``"STOR /bucket/.part-..."``), in order; ``srv.fail(pattern,
...)`` answers a reply of the test's choosing (``"451 ..."``), resets the control connection, or
ends a ``RETR``'s data early, at the ``nth`` command whose line matches ``pattern``: the
server's own fault injection, since FTP's data connections go around any proxy.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USER = "ckpt"
PASSWORD = "s3cr3t-ftp-pw"  # a test secret: no message may show it
#: An account that may list and stat but not retrieve or store (pyftpdlib answers 550).
LISTER = "lister"
#: An account that may read, but not even stat what is under /bucket/private (pyftpdlib: 550).
GUEST = "guest"


@dataclass
class Rule:
    pattern: re.Pattern[str]
    action: str  # "reply", "reset" or "short"
    reply: str = ""
    nth: int = 1
    times: int = 1
    seen: int = 0


@dataclass
class FtpServer:
    endpoint: str = ""
    log: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(
        self, pattern: str, action: str = "reply", reply: str = "451 fault", nth: int = 1, times: int = 1
    ) -> None:
        """At the ``nth`` command line matching ``pattern`` (``re.search``), and the ``times - 1``
        matching ones after it: answer ``reply`` instead of running it (``"reply"``), close the
        control connection (``"reset"``), or send half of a RETR's file and end (``"short"``)."""
        with self.lock:
            self.rules.append(Rule(re.compile(pattern), action, reply, nth, times))

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.log.clear()
            self.fired.clear()

    def take(self, line: str) -> Rule | None:
        """The rule that fires at ``line``, if any (the server's thread calls it per command)."""
        with self.lock:
            self.log.append(line)
            for rule in self.rules:
                if rule.times and rule.pattern.search(line):
                    rule.seen += 1
                    if rule.seen >= rule.nth:
                        rule.times -= 1
                        self.fired.append(line)
                        return rule
        return None


def handler_class(state: FtpServer, root: str) -> type[Any]:
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.handlers.ftp.producers import FileProducer

    authorizer = DummyAuthorizer()
    authorizer.add_user(USER, PASSWORD, root, perm="elradfmwMT")
    authorizer.add_user(LISTER, PASSWORD, root, perm="el")
    authorizer.add_user(GUEST, PASSWORD, root, perm="elr")
    Path(root, "bucket", "private").mkdir(parents=True, exist_ok=True)
    authorizer.override_perm(GUEST, str(Path(root, "bucket", "private")), perm="e", recursive=True)

    class Handler(FTPHandler):
        def process_command(self, cmd: str, *args: Any, **kwargs: Any) -> None:
            arg = args[0] if args else ""
            inside = self.fs is not None and isinstance(arg, str) and arg.startswith(self.fs.root)
            shown = self.fs.fs2ftp(arg) if inside else arg
            rule = state.take(f"{cmd} {shown}".strip())
            if rule is None:
                super().process_command(cmd, *args, **kwargs)
            elif rule.action == "reset":
                self.close()
            elif rule.action == "short" and cmd == "RETR":
                with open(arg, "rb") as f:
                    data = f.read()
                half = io.BytesIO(data[: len(data) // 2])
                half.name = arg  # the data channel logs it
                self._restart_position = 0
                producer = FileProducer(half, self._current_type)
                self.push_dtp_data(producer, isproducer=True, file=half, cmd="RETR")
            else:
                self._last_response = ""
                self.respond(rule.reply)

    Handler.authorizer = authorizer
    Handler.banner = "ftp test server"
    return Handler


@contextmanager
def ftp_server(root: Path) -> Iterator[FtpServer]:
    """A server of ``root`` (its BUCKET folders made by the caller) for the ``with`` block."""
    from pyftpdlib.servers import FTPServer

    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)  # a line per command otherwise
    state = FtpServer()
    server = FTPServer(("127.0.0.1", 0), handler_class(state, str(root)))
    state.endpoint = f"127.0.0.1:{server.address[1]}"
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():  # the loop's timeout only bounds how late a stop is seen
            server.ioloop.loop(0.05, blocking=False)
        server.close_all()

    thread = threading.Thread(target=run, name="ftp-test-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(timeout=60)

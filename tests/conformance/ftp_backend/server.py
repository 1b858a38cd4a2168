"""The test server: pyftpdlib on 127.0.0.1 in a thread, with faults put at FTP requests.

``with ftp_server(root) as srv``: ``srv.url`` is ``HOST:PORT``; ``srv.log`` lists every command
line of an operation the server received (``"STOR /bucket/.part-..."``), in order; and
``srv.fail_request(match, fault, nth=, times=)`` puts a fault at a request, as the suites'
``FaultProxy`` does for HTTP: the server's own fault injection, since FTP's data connections go
around any proxy of the control connection.
"""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flyte_checkpoint.testing import Fault
from flyte_checkpoint.testing.faultproxy import RequestRule

USER = "ckpt"
PASSWORD = "s3cr3t-ftp-pw"  # a test secret: no message may show it
#: An account that may list and stat but not retrieve or store (pyftpdlib answers 550).
LISTER = "lister"
#: An account that may read, but not even stat what is under /bucket/private (pyftpdlib: 550).
GUEST = "guest"


#: The FTP reply that means what each HTTP status the suites inject means.
ANSWERS = {
    403: "550 Not enough privileges.",
    429: "450 Too many requests: try again later.",
    500: "451 Local error in processing.",
    503: "421 Service not available.",
}
#: Commands of a session's setup (a new connection's login, a data connection's opening): not
#: requests of an operation, so neither logged nor faulted (a kept-alive connection skips them,
#: so two runs of one operation would differ).
SESSION = frozenset({"USER", "PASS", "TYPE", "PASV", "EPSV", "OPTS", "FEAT", "SYST", "QUIT", "NOOP"})


def matching(pattern: str) -> Callable[[str], bool]:
    """A request matcher: the lines ``pattern`` is found in (``re.search``)."""
    return re.compile(pattern).search  # type: ignore[return-value]


@dataclass
class FtpServer:
    """The server's fault injection, with the interface ``FaultProxy.fail_request`` has (the
    suites' ``StoreRecipe.injector``): ``url``, ``log``, ``fail_request``, ``heal``,
    ``reset_records``."""

    url: str = ""
    log: list[str] = field(default_factory=list)
    rules: list[RequestRule] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return self.url

    def fail_request(
        self, match: Callable[[str], bool], fault: Fault, *, nth: int = 1, times: int = 1
    ) -> RequestRule:
        """At the ``nth`` request whose line (``"RNTO /bucket/key"``) ``match`` accepts, and the
        ``times - 1`` after it: ``Fault.answer(status)`` answers the FTP reply of that meaning
        (:data:`ANSWERS`) instead of running it, ``Fault.reset`` closes the control connection,
        ``Fault.truncate`` (a RETR) sends half the file and ends the data cleanly."""
        rule = RequestRule(match, fault, nth, times)
        with self.lock:
            self.rules.append(rule)
        return rule

    def heal(self) -> None:
        with self.lock:
            self.rules = []

    def reset_records(self) -> None:
        with self.lock:
            self.log = []

    def take(self, line: str) -> RequestRule | None:
        """The rule that fires at ``line``, if any (the server's thread calls it per command)."""
        if line.partition(" ")[0] in SESSION:
            return None
        with self.lock:
            self.log.append(line)
            for rule in self.rules:
                if rule.match(line) and rule.count(line, may_fire=True):
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
            elif rule.fault.action == "reset":
                self.close()
            elif rule.fault.action == "truncate" and cmd == "RETR":
                with open(arg, "rb") as f:
                    data = f.read()
                half = io.BytesIO(data[: len(data) // 2])
                half.name = arg  # the data channel logs it
                self._restart_position = 0
                producer = FileProducer(half, self._current_type)
                self.push_dtp_data(producer, isproducer=True, file=half, cmd="RETR")
            else:
                self._last_response = ""
                self.respond(ANSWERS.get(rule.fault.status, "451 Local error in processing."))

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
    state.url = f"127.0.0.1:{server.address[1]}"
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

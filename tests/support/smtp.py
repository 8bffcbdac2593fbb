"""A real SMTP receiver for tests: a server thread on 127.0.0.1 that speaks
enough of RFC 5321 for Django's SMTP backend (EHLO, MAIL, RCPT, DATA,
RSET, NOOP, QUIT) and keeps each message's envelope and raw bytes, as a
mail server would hand them to a mailbox."""

from __future__ import annotations

import email
import email.policy
import socketserver
import threading
from dataclasses import dataclass, field
from email.message import EmailMessage


@dataclass
class Received:
    sender: str
    recipients: list[str]
    raw: bytes
    lines: list[bytes] = field(default_factory=list)

    @property
    def message(self) -> EmailMessage:
        return email.message_from_bytes(self.raw, policy=email.policy.default)


class SmtpReceiver:
    def __init__(self):
        self.messages: list[Received] = []
        receiver = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(f"{line}\r\n".encode())

            def handle(self):
                self.reply("220 test receiver ready")
                sender, recipients = "", []
                while line := self.rfile.readline():
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        self.reply("250-test receiver\r\n250-8BITMIME\r\n250 SMTPUTF8")
                    elif verb == b"MAIL":
                        sender, recipients = _address(line), []
                        self.reply("250 sender ok")
                    elif verb == b"RCPT":
                        recipients.append(_address(line))
                        self.reply("250 recipient ok")
                    elif verb == b"DATA":
                        self.reply("354 end with <CRLF>.<CRLF>")
                        lines = []
                        while (data := self.rfile.readline()) not in (b".\r\n", b""):
                            # Dot-stuffing undone (RFC 5321 4.5.2).
                            lines.append(data[1:] if data.startswith(b".") else data)
                        receiver.messages.append(Received(sender, recipients, b"".join(lines), lines))
                        self.reply("250 queued")
                    elif verb in (b"RSET", b"NOOP"):
                        self.reply("250 ok")
                    elif verb == b"QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("502 not implemented")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SmtpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _address(line: bytes) -> str:
    """The address in `MAIL FROM:<a@b> SIZE=…` or `RCPT TO:<a@b>`."""
    text = line.decode("utf-8").strip()
    return text[text.index("<") + 1 : text.index(">")]

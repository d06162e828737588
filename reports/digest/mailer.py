"""Sends the emails through the site's SMTP server: one connection per cycle, STARTTLS when configured
(certificate checked against the system's CAs), a login when configured, every step under a timeout.

What a failure means for the email: a 5xx answer refuses it for good (failed); a 4xx answer, a timeout or
a lost connection may pass (retry, next cycle). When the server cannot be reached or refuses the login,
nothing else is tried this cycle: ServerUnavailable says so, and the other emails wait."""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from types import TracebackType

from gpuscope.core.logredact import redact_secrets
from gpuscope.reports.digest.settings import EmailSettings

MAX_DETAIL = 300


@dataclass(frozen=True)
class MailOutcome:
    result: str  # sent | retry | failed
    detail: str


class ServerUnavailable(Exception):
    """The SMTP server could not be reached, did not take STARTTLS, or refused the login."""

    def __init__(self, outcome: MailOutcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


class Mailer:
    def __init__(self, settings: EmailSettings) -> None:
        self._settings = settings
        self._smtp: smtplib.SMTP | None = None

    def send(self, message: EmailMessage, to: str) -> MailOutcome:
        """Sends `message` to `to` only (the envelope's recipient, whatever the headers say)."""
        smtp = self._smtp or self._connect()
        try:
            refused = smtp.send_message(message, to_addrs=[to])
        except smtplib.SMTPRecipientsRefused as exc:
            codes = [code for code, _ in exc.recipients.values()]
            return _outcome(all(code >= 500 for code in codes), f"recipient refused: {_answers(exc.recipients)}")
        except smtplib.SMTPResponseException as exc:
            if exc.smtp_code == 421:  # the server is closing the connection
                self.close()
            return _outcome(exc.smtp_code >= 500, f"SMTP {exc.smtp_code}: {_text(exc.smtp_error)}")
        except (smtplib.SMTPException, OSError) as exc:  # the connection broke: a new one for the next email
            self.close()
            return MailOutcome("retry", _detail(exc))
        if refused:
            return _outcome(True, f"recipient refused: {_answers(refused)}")
        return MailOutcome("sent", "sent")

    def _connect(self) -> smtplib.SMTP:
        s = self._settings
        smtp = smtplib.SMTP(timeout=s.timeout_s)
        try:
            smtp.connect(s.smtp_host, s.smtp_port)
            if s.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if s.username is not None and s.password is not None:
                smtp.login(s.username, s.password)
        except (smtplib.SMTPException, OSError) as exc:
            _quit(smtp)
            detail = f"SMTP server {s.smtp_host}:{s.smtp_port}: {_detail(exc)}"
            raise ServerUnavailable(MailOutcome("retry", detail)) from exc
        self._smtp = smtp
        return smtp

    def close(self) -> None:
        if self._smtp is not None:
            _quit(self._smtp)
            self._smtp = None

    def __enter__(self) -> Mailer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _outcome(permanent: bool, detail: str) -> MailOutcome:
    return MailOutcome("failed" if permanent else "retry", detail)


def _answers(recipients: dict[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{code} {_text(answer)}" for code, answer in recipients.values())


def _text(answer: bytes | str) -> str:
    text = answer.decode(errors="replace") if isinstance(answer, bytes) else answer
    return redact_secrets(" ".join(text.split()))[:MAX_DETAIL]


def _detail(exc: BaseException) -> str:
    return _text(f"{type(exc).__name__}: {exc}")


def _quit(smtp: smtplib.SMTP) -> None:
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        smtp.close()

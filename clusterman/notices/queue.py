"""One SQS queue of notices, read at least once: receive, then delete only what was handled.

A message is handled once its notices are filed in their pools' inboxes (or it names no instance
of the cluster: deleted with a warning, as Clusterman's drainer does). One that cannot be read as
an event, or that was received ``max_receives`` times without being handled (a reader killed
mid-way, a store that keeps refusing), is set aside: sent to the dead-letter queue when there is
one, else logged whole, and deleted. Every call is bounded in time: SQS refusing or hanging costs
the drainer a wait, never a stuck process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client

log = logging.getLogger(__name__)

LONGEST_WAIT = 20  # seconds: SQS's longest long poll


class QueueError(Exception):
    """SQS could not be reached or refused; one line."""


@dataclass(frozen=True)
class Message:
    id: str
    body: str
    receipt: str
    receives: int  # ApproximateReceiveCount: this receive included
    sender: str = ""  # the "Sender" attribute of Clusterman's host messages


class NoticeQueue:
    """``url``'s messages; the client is built on first use. ``wait_seconds``: the long poll."""

    def __init__(
        self,
        settings: AwsSettings,
        url: str,
        wait_seconds: int = LONGEST_WAIT,
        visibility_seconds: float = 30.0,
        dead_letter_url: str = "",
        timeout_seconds: float = 10.0,
    ) -> None:
        self.settings = settings
        self.url = url
        self.wait_seconds = max(0, min(LONGEST_WAIT, int(wait_seconds)))
        self.visibility_seconds = visibility_seconds
        self.dead_letter_url = dead_letter_url
        self.timeout_seconds = timeout_seconds
        self._client: Any = None

    def _sqs(self) -> Any:
        if self._client is None:
            # a long poll answers within wait_seconds: the read may take that long and a bit
            self._client = client(
                self.settings,
                "sqs",
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=self.timeout_seconds,
                read_timeout=self.wait_seconds + self.timeout_seconds,
            )
        return self._client

    def receive(self, most: int = 10) -> list[Message]:
        answer = self._call(
            "receiving from",
            "receive_message",
            QueueUrl=self.url,
            MaxNumberOfMessages=max(1, min(10, most)),
            WaitTimeSeconds=self.wait_seconds,
            VisibilityTimeout=max(1, int(self.visibility_seconds)),
            AttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=["Sender"],
        )
        return [
            Message(
                m["MessageId"],
                m.get("Body", ""),
                m["ReceiptHandle"],
                int((m.get("Attributes") or {}).get("ApproximateReceiveCount", "1")),
                str(((m.get("MessageAttributes") or {}).get("Sender") or {}).get("StringValue", "")),
            )
            for m in answer.get("Messages") or ()
        ]

    def delete(self, message: Message) -> None:
        self._call("deleting a message from", "delete_message", QueueUrl=self.url, ReceiptHandle=message.receipt)

    def delete_all(self, messages: list[Message]) -> list[Message]:
        """Delete handled messages ten at a time (one call each ten); those SQS did not delete
        (they come back, and are filed again as repeats). QueueError when a call failed."""
        failed: list[Message] = []
        for k in range(0, len(messages), 10):
            batch = messages[k : k + 10]
            entries = [{"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(batch)]
            answer = self._call("deleting messages from", "delete_message_batch", QueueUrl=self.url, Entries=entries)
            failed += [batch[int(f["Id"])] for f in answer.get("Failed") or ()]
        return failed

    def set_aside(self, message: Message, why: str) -> None:
        """Move a message that cannot be handled out of the way (QueueError when that failed: it
        stays, and comes back after its visibility timeout)."""
        if self.dead_letter_url:
            self._call(
                "setting a message aside in",
                "send_message",
                QueueUrl=self.dead_letter_url,
                MessageBody=message.body,
                MessageAttributes=self._kept_attributes(message, why),
            )
            log.warning("message %s set aside in %s: %s", message.id, self.dead_letter_url, why)
        else:
            log.error("message %s set aside (deleted; no dead_letter_queue_url): %s; its body: %s",
                      message.id, why, message.body[:4000])  # fmt: skip
        self.delete(message)

    def _kept_attributes(self, message: Message, why: str) -> dict[str, Any]:
        """Why it was set aside and where from; a host's ``Sender``, so that it can be sent back."""
        attributes = {
            "why": {"DataType": "String", "StringValue": why[:1000]},
            "queue": {"DataType": "String", "StringValue": self.url},
        }
        if message.sender:
            attributes["Sender"] = {"DataType": "String", "StringValue": message.sender}
        return attributes

    def _call(self, what: str, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._sqs(), operation)(**kwargs)
        except ClientError as e:
            error = e.response.get("Error", {})
            raise QueueError(f"{what} {self.url}: {error.get('Code', '?')}: {error.get('Message', e)}") from e
        except (BotoCoreError, OSError) as e:
            raise QueueError(f"{what} {self.url}: {type(e).__name__}: {e}") from e

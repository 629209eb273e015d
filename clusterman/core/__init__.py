"""The core: value types and pure logic, no I/O (docs/architecture.md).

Resources and their arithmetic, the pool snapshot model, folds over a snapshot's nodes, accounting
(allocated, reserved, slack) and the cloud view joined to the scheduler's. The decision built on
them is ``clusterman.decision``. Only the standard library is imported here, never a socket.
"""

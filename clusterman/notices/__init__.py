"""Notices from outside the pool: the cloud's events read from SQS, and the inbox each pool's run reads."""

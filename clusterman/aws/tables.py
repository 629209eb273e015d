"""Creating the DynamoDB tables a backend needs, idempotently (``clusterman setup``).

A table that exists with the keys we need is left as it is, but for its TTL, which is switched on
when off; a table that exists with other keys is an error naming both layouts (writing to it
would fail on every item). New tables bill per request: an autoscaler writes a few items a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clusterman.errors import UserError

# DynamoDB's answers that no retry changes: the table named is not there, or these credentials may
# not use it
UNUSABLE_TABLE_CODES = frozenset(
    {"ResourceNotFoundException", "AccessDeniedException", "UnrecognizedClientException", "InvalidSignatureException"}
)


class TableLayoutError(UserError):
    """A table of that name exists with other keys."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    hash_key: tuple[str, str]  # (attribute, type: S or N)
    range_key: tuple[str, str]
    ttl_attribute: str | None = None  # Unix seconds; DynamoDB deletes items some time after them

    def describe(self) -> str:
        keys = f"hash {self.hash_key[0]} ({self.hash_key[1]}), range {self.range_key[0]} ({self.range_key[1]})"
        return keys + (f", TTL on {self.ttl_attribute}" if self.ttl_attribute else "")


def ensure_table(dynamodb: Any, spec: TableSpec) -> list[str]:
    """Create the table or check the one there; returns what was done (empty: it was in place).
    botocore's errors pass through (the caller names the endpoint)."""
    from botocore.exceptions import ClientError

    done = []
    try:
        table = dynamodb.describe_table(TableName=spec.name)["Table"]
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        table = None
    if table is None:
        try:
            dynamodb.create_table(
                TableName=spec.name,
                KeySchema=[
                    {"AttributeName": spec.hash_key[0], "KeyType": "HASH"},
                    {"AttributeName": spec.range_key[0], "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": name, "AttributeType": kind} for name, kind in (spec.hash_key, spec.range_key)
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            done.append("created")
        except ClientError as e:  # created meanwhile by another setup: checked below like any existing table
            if e.response.get("Error", {}).get("Code") != "ResourceInUseException":
                raise
        dynamodb.get_waiter("table_exists").wait(TableName=spec.name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        table = dynamodb.describe_table(TableName=spec.name)["Table"]
    _check_keys(spec, table)
    if spec.ttl_attribute:
        ttl = dynamodb.describe_time_to_live(TableName=spec.name).get("TimeToLiveDescription", {})
        if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
            if ttl.get("AttributeName") != spec.ttl_attribute:
                raise TableLayoutError(
                    f"DynamoDB table {spec.name}: its TTL is on {ttl.get('AttributeName')!r}, "
                    f"clusterman writes expiry times to {spec.ttl_attribute!r}"
                )
        else:
            dynamodb.update_time_to_live(
                TableName=spec.name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
            )
            done.append(f"TTL on {spec.ttl_attribute} enabled")
    return done


def _check_keys(spec: TableSpec, table: dict[str, Any]) -> None:
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    found = {k["KeyType"]: (k["AttributeName"], types.get(k["AttributeName"], "?")) for k in table.get("KeySchema", [])}
    if found.get("HASH") != spec.hash_key or found.get("RANGE") != spec.range_key:
        have = ", ".join(f"{kind.lower()} {name} ({t})" for kind, (name, t) in sorted(found.items()))
        raise TableLayoutError(
            f"DynamoDB table {spec.name} exists with keys {have}; clusterman needs {spec.describe()}: "
            "name another table in the main file, or remove this one"
        )

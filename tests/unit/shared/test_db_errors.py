"""Which database errors mean "PostgreSQL is away" (DependencyDown) and which are ours."""

from __future__ import annotations

import asyncpg
import pytest

from shared.db.pool import is_unavailable, translate_db_errors
from shared.errors import DependencyDown


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError(),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.InvalidPasswordError("password authentication failed"),
        asyncpg.InvalidCatalogNameError('database "x" does not exist'),
        asyncpg.ReadOnlySQLTransactionError("cannot execute INSERT in a read-only transaction"),
        asyncpg.InterfaceError("cannot perform operation: connection is closed"),
        asyncpg.InterfaceError(
            "cannot call Connection.fetch(): connection has been released back to the pool"
        ),
    ],
)
def test_unavailable(exc: BaseException) -> None:
    assert is_unavailable(exc)
    with pytest.raises(DependencyDown) as caught, translate_db_errors():
        raise exc
    assert caught.value.__cause__ is exc
    assert caught.value.retryable


@pytest.mark.parametrize(
    "exc",
    [
        asyncpg.UniqueViolationError("duplicate key value violates unique constraint"),
        asyncpg.UndefinedTableError('relation "runs" does not exist'),
        asyncpg.SerializationError("could not serialize access"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        ValueError("ours"),
    ],
)
def test_not_unavailable(exc: BaseException) -> None:
    assert not is_unavailable(exc)
    with pytest.raises(type(exc)), translate_db_errors():
        raise exc

"""Forgetting's tests (test_forget.py) on PostgreSQL: the deleted rows leave nothing matched
by the full-text column's index, and nothing in pgvector's column where the server has it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_postgres import SERVER
from tests.integration.test_postgres import pg_url as pg_url  # fixture
from tests.memory import test_forget as on_sqlite

# the same tests, collected here again with this module's `store_section`
test_forget_by_confirmed_query_only_in_the_callers_bank = (
    on_sqlite.test_forget_by_confirmed_query_only_in_the_callers_bank
)
test_forget_by_id_never_reaches_another_users_memory = (
    on_sqlite.test_forget_by_id_never_reaches_another_users_memory
)
test_the_cli_forgets_a_users_memories_with_the_gateway_up_and_down = (
    on_sqlite.test_the_cli_forgets_a_users_memories_with_the_gateway_up_and_down
)
test_the_operator_route_works_with_the_archive_tools_off = (
    on_sqlite.test_the_operator_route_works_with_the_archive_tools_off
)

pytestmark = pytest.mark.skipif(not SERVER, reason="set HERMES_TEST_POSTGRES (CI does)")


@pytest.fixture
def store_section(pg_url: str) -> dict[str, Any]:
    return {"url": pg_url}

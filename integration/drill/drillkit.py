"""Transition only: the drill's former names for what integration/walshiptest
now holds. New code imports from the package: processes from
walshiptest.procs, the OS user, PostgreSQL clusters and psql sessions from
walshiptest.pg, LSNs from walshiptest.lsn, waits from walshiptest.waits.
This module goes once nothing imports it.
"""

__all__ = [
    "DEFAULT_USER", "DrillEnv", "DrillError", "PG_SUPERUSER", "PgCluster", "Proc", "PsqlSession",
    "SMALL_WAL_SETTINGS", "TEST_PRIMARY_SETTINGS", "XLOG_BLCKSZ", "_SBIN_PATH", "_WALDUMP_RE",
    "ensure_user", "find_pg_bin", "fmt_lsn", "free_port", "log", "parse_lsn", "parse_segment",
    "position_lsn", "read_text", "record_end", "segment_name", "test_primary", "wait_until",
    "waldump_end"]

from integration.walshiptest.lsn import (  # noqa: F401
    XLOG_BLCKSZ, fmt_lsn, parse_lsn, parse_segment, position_lsn, record_end, segment_name)
from integration.walshiptest.pg import (  # noqa: F401
    DEFAULT_USER, PgCluster, PsqlSession, SMALL_WAL_SETTINGS, TEST_PRIMARY_SETTINGS,
    WALDUMP_RE as _WALDUMP_RE, ensure_user, find_pg_bin, test_primary, waldump_end)
from integration.walshiptest.pg import PgEnv as DrillEnv  # noqa: F401
from integration.walshiptest.pg import SUPERUSER as PG_SUPERUSER  # noqa: F401
from integration.walshiptest.ports import free_port  # noqa: F401
from integration.walshiptest.procs import (  # noqa: F401
    Proc, SBIN_PATH as _SBIN_PATH, log, read_text)
from integration.walshiptest.waits import StepError as DrillError  # noqa: F401
from integration.walshiptest.waits import wait_until  # noqa: F401

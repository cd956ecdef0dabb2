"""The tuning database: measured programs, kept in an SQLite file that survives crashes and is
shared safely between processes, found again by workload and target."""
from metasched.database.database import Database
from metasched.database.records import Confirmation, Record, WorkloadSummary, program_key
from metasched.database.schema import SCHEMA_VERSION
from metasched.database.target import Target

__all__ = ["Confirmation", "Database", "Record", "SCHEMA_VERSION", "Target", "WorkloadSummary", "program_key"]

"""The tuning database: measured programs, kept in an SQLite file that survives crashes and is
shared safely between processes, found again by workload and target. ``TuningDatabase`` is
what a tuning run needs of one, for a database of your own."""
from metasched.database.database import Database
from metasched.database.interface import TuningDatabase
from metasched.database.records import Confirmation, Record, WorkloadSummary, program_key
from metasched.database.schema import SCHEMA_VERSION
from metasched.database.target import Target

__all__ = ["Confirmation", "Database", "Record", "SCHEMA_VERSION", "Target", "TuningDatabase", "WorkloadSummary",
           "program_key"]

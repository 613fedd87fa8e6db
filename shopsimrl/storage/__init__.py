"""Atomic files and directories, file hashes and tolerant JSONL: the audit record under runs/ is written only through here."""

from shopsimrl.storage.atomic import (
    atomic_open,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_many,
    atomic_write_text,
    fsync_directory,
    json_bytes,
    open_temp,
)
from shopsimrl.storage.directories import atomic_directory
from shopsimrl.storage.faults import SPACE_ERRNOS, os_error_cause, storage_error, writable_dir_problem
from shopsimrl.storage.hashing import file_sha256
from shopsimrl.storage.jsonl import JsonlReadResult, append_jsonl, read_jsonl, repair_torn_tail

__all__ = [
    "SPACE_ERRNOS",
    "JsonlReadResult",
    "append_jsonl",
    "atomic_directory",
    "atomic_open",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_many",
    "atomic_write_text",
    "file_sha256",
    "fsync_directory",
    "json_bytes",
    "open_temp",
    "os_error_cause",
    "read_jsonl",
    "repair_torn_tail",
    "storage_error",
    "writable_dir_problem",
]

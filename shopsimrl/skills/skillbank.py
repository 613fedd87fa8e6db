"""The skillbank file: ordered skill chunks, each with a stable `logical_chunk_id`.

Format (JSON, `schema_version` 1; example in configs/skillbank.example.json, spec in docs/curriculum.md):

    {"schema_version": 1, "name": "...", "description": "...",
     "chunks": [{"logical_chunk_id": "search-with-filters", "text": "...",
                 "provenance": {"source": "seed", ...}, "active": true}, ...]}

The order of `chunks` is the order in which included chunks appear in the prompt. Inactive chunks
stay in the file (their ids are never reused) but are never drawn, never offered to a full-skill
retry and have no rho. `load_skillbank` reports every problem of a file at once.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shopsimrl.config.files import parse_json, read_config_text
from shopsimrl.errors import ConfigError

SKILLBANK_SCHEMA_VERSION = 1
CHUNK_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_CHUNK_TEXT_CHARS = 4000  # a chunk is a prompt paragraph, not a document
_TOP_KEYS = {"schema_version", "name", "description", "chunks"}
_CHUNK_KEYS = {"logical_chunk_id", "text", "provenance", "active"}


class SkillChunk(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    logical_chunk_id: str
    text: str
    provenance: dict[str, Any]
    active: bool = True


class Skillbank(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int = SKILLBANK_SCHEMA_VERSION
    name: str = ""
    description: str = ""
    chunks: tuple[SkillChunk, ...] = Field(default_factory=tuple)

    @property
    def active_chunks(self) -> tuple[SkillChunk, ...]:
        return tuple(chunk for chunk in self.chunks if chunk.active)

    @property
    def active_ids(self) -> list[str]:
        return [chunk.logical_chunk_id for chunk in self.active_chunks]

    def texts_for(self, mask: list[str] | tuple[str, ...] | set[str]) -> list[str]:
        """Texts of the included chunks, in skillbank order (not mask order). Unknown ids raise."""
        wanted = set(mask)
        unknown = wanted - set(self.active_ids)
        if unknown:
            raise KeyError(f"mask names chunks that are not active in the skillbank: {sorted(unknown)}")
        return [chunk.text for chunk in self.active_chunks if chunk.logical_chunk_id in wanted]


def empty_skillbank() -> Skillbank:
    """The skillbank of a run without `shopsim.skillbank`: every group is skill-free or assisted-empty."""
    return Skillbank(name="empty", chunks=())


def load_skillbank(path: str | os.PathLike[str]) -> Skillbank:
    """Read and validate a skillbank JSON file; raises `ConfigError` listing every problem."""
    source = str(path)
    try:
        text = read_config_text(path)
    except OSError as exc:
        raise ConfigError(source, [f"cannot read file: {exc.strerror or exc}"]) from None
    raw = parse_json(text, source)
    return validate_skillbank(raw, source)


def validate_skillbank(raw: Any, source: str = "skillbank") -> Skillbank:
    """Validate a parsed skillbank; every problem is collected before raising."""
    problems = _problems(raw)
    if problems:
        raise ConfigError(source, problems)
    return Skillbank(
        schema_version=raw["schema_version"],
        name=raw.get("name", ""),
        description=raw.get("description", ""),
        chunks=tuple(SkillChunk(**chunk) for chunk in raw["chunks"]),
    )


def _problems(raw: Any) -> list[str]:
    if not isinstance(raw, dict):
        return [f"top level: expected a JSON object, got {type(raw).__name__}"]
    problems = [f"unknown top-level key {key!r}" for key in sorted(set(raw) - _TOP_KEYS)]
    version = raw.get("schema_version")
    if version is None:
        problems.append("schema_version: missing")
    elif version != SKILLBANK_SCHEMA_VERSION:
        problems.append(
            f"schema_version: unsupported value {version!r} (expected {SKILLBANK_SCHEMA_VERSION})"
        )
    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], str):
            problems.append(f"{key}: expected a string, got {type(raw[key]).__name__}")
    chunks = raw.get("chunks")
    if chunks is None:
        problems.append("chunks: missing")
        return problems
    if not isinstance(chunks, list):
        problems.append(f"chunks: expected a list, got {type(chunks).__name__}")
        return problems
    first_seen: dict[str, int] = {}
    for position, chunk in enumerate(chunks):
        problems.extend(_chunk_problems(chunk, f"chunks[{position}]"))
        chunk_id = chunk.get("logical_chunk_id") if isinstance(chunk, dict) else None
        if isinstance(chunk_id, str):
            if chunk_id in first_seen:
                problems.append(
                    f"chunks[{position}].logical_chunk_id: duplicate id {chunk_id!r} "
                    f"(first used by chunks[{first_seen[chunk_id]}])"
                )
            else:
                first_seen[chunk_id] = position
    return problems


def _chunk_problems(chunk: Any, where: str) -> list[str]:
    if not isinstance(chunk, dict):
        return [f"{where}: expected an object, got {type(chunk).__name__}"]
    problems = [f"{where}: unknown key {key!r}" for key in sorted(set(chunk) - _CHUNK_KEYS)]
    chunk_id = chunk.get("logical_chunk_id")
    if chunk_id is None:
        problems.append(f"{where}.logical_chunk_id: missing")
    elif not isinstance(chunk_id, str) or not CHUNK_ID_PATTERN.match(chunk_id):
        problems.append(
            f"{where}.logical_chunk_id: {chunk_id!r} is not a valid id "
            "(1-64 characters: letters, digits, '_', '.', '-'; starting with a letter or digit)"
        )
    text = chunk.get("text")
    if text is None:
        problems.append(f"{where}.text: missing")
    elif not isinstance(text, str) or not text.strip():
        problems.append(f"{where}.text: expected a non-empty string")
    elif len(text) > MAX_CHUNK_TEXT_CHARS:
        problems.append(
            f"{where}.text: {len(text)} characters, more than the limit of {MAX_CHUNK_TEXT_CHARS}"
        )
    provenance = chunk.get("provenance")
    if provenance is None:
        problems.append(f"{where}.provenance: missing")
    elif not isinstance(provenance, dict):
        problems.append(f"{where}.provenance: expected an object, got {type(provenance).__name__}")
    elif not isinstance(provenance.get("source"), str) or not provenance["source"]:
        problems.append(f"{where}.provenance.source: missing or not a non-empty string")
    if "active" in chunk and not isinstance(chunk["active"], bool):
        problems.append(f"{where}.active: expected true or false, got {chunk['active']!r}")
    return problems

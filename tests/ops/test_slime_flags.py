"""The declared slime flag list: its helpers, and each entry against slime v0.3.1's own source.

The source check needs a git copy of THUDM/slime with commit a6272da0 (v0.3.1): set SLIME_GIT_DIR
to it (a clone or bare mirror). Without one the check is skipped and says so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from shopsimrl.ops import slime_flags
from shopsimrl.ops.slime_flags import (
    FLAG_NAMES,
    FLAGS,
    FORBIDDEN_FLAGS,
    FlagSource,
    flags_in_command,
    forbidden_flags,
    missing_from_parser_source,
    missing_from_scripts,
    unlisted_flags,
)

_DEFAULT_MIRROR = Path("/work/.mirror/THUDM+slime/repo")


def _slime_git() -> Path | None:
    candidate = Path(os.environ.get("SLIME_GIT_DIR", _DEFAULT_MIRROR))
    if not candidate.exists():
        return None
    probe = subprocess.run(["git", "-C", str(candidate), "cat-file", "-e", f"{slime_flags.SLIME_COMMIT}^{{commit}}"],
                           capture_output=True, check=False)
    return candidate if probe.returncode == 0 else None


SLIME_GIT = _slime_git()
needs_slime = pytest.mark.skipif(SLIME_GIT is None, reason="no slime git copy with v0.3.1 (set SLIME_GIT_DIR)")


def test_names_are_unique_and_well_formed():
    assert len(FLAG_NAMES) == len(FLAGS)
    for flag in FLAGS:
        assert flag.name.startswith("--") and flag.name == flag.name.lower() and " " not in flag.name
        assert flag.purpose


def test_the_key_flag_is_forbidden_and_not_declared():
    key_flag = "--wandb" + "-key"
    assert FORBIDDEN_FLAGS == {key_flag}
    assert key_flag not in FLAG_NAMES
    argv = ["python3", "train.py", "--use-wandb", key_flag, "abc", "--wandb-project=p"]
    assert forbidden_flags(argv) == [key_flag]
    assert unlisted_flags(argv) == [key_flag]


def test_flags_in_command_reads_only_train_py_arguments():
    argv = ["ray", "job", "submit", "--address=http://x", "--", "python3", "/root/slime/train.py",
            "--num-layers", "32", "--wandb-project=p", "--nonsense"]
    assert flags_in_command(argv) == ["--num-layers", "--wandb-project", "--nonsense"]
    assert unlisted_flags(argv) == ["--nonsense"]


def test_flags_in_command_without_train_py():
    with pytest.raises(ValueError, match=r"^no train.py in the command: ray start --head$"):
        flags_in_command(["ray", "start", "--head"])


def test_missing_from_parser_source_on_a_small_parser():
    text = '\n'.join(f'parser.add_argument("{f.name}", type=str)' for f in FLAGS
                     if f.source is FlagSource.SLIME and f.name != "--custom-rm-path")
    assert missing_from_parser_source(text) == ["--custom-rm-path"]


def test_missing_from_scripts_does_not_match_prefixes():
    text = "\n".join(f"   {f.name} 1" for f in FLAGS if f.source is not FlagSource.SLIME and f.name != "--lr")
    text += "\n   --lr-decay-style constant\n"
    assert missing_from_scripts(text) == ["--lr"]


@needs_slime
def test_every_slime_flag_is_in_v031_arguments_py():
    source = subprocess.run(["git", "-C", str(SLIME_GIT), "show",
                             f"{slime_flags.SLIME_COMMIT}:{slime_flags.SLIME_ARGUMENTS_PATH}"],
                            capture_output=True, text=True, check=True).stdout
    assert 'parser.add_argument(\n            "--custom-config-path"' in source or '"--custom-config-path"' in source
    assert missing_from_parser_source(source) == []
    # The forbidden flag is real (so forbidding it matters).
    assert f'"{next(iter(FORBIDDEN_FLAGS))}"' in source


@needs_slime
def test_every_megatron_and_sglang_flag_is_passed_by_slime_v031_scripts():
    files = subprocess.run(["git", "-C", str(SLIME_GIT), "ls-tree", "-r", "--name-only", slime_flags.SLIME_COMMIT,
                            "--", "scripts"], capture_output=True, text=True, check=True).stdout.split()
    shell = [f for f in files if f.endswith(".sh")]
    assert len(shell) > 20
    text = "\n".join(subprocess.run(["git", "-C", str(SLIME_GIT), "show", f"{slime_flags.SLIME_COMMIT}:{f}"],
                                    capture_output=True, text=True, check=True).stdout for f in shell)
    assert missing_from_scripts(text) == []


def test_every_slime_flag_is_in_the_vendored_v031_arguments_py():
    """The same check against ../shared/vendor/slime-v0.3.1 (or SLIME_SRC), which needs no git copy."""
    root = Path(__file__).resolve().parents[2]
    src = Path(os.environ.get("SLIME_SRC") or root.parent / "shared/vendor/slime-v0.3.1")
    arguments = src / slime_flags.SLIME_ARGUMENTS_PATH
    if not arguments.is_file():
        pytest.skip(f"slime v0.3.1 source not found at {src} (set SLIME_SRC)")
    assert slime_flags.missing_from_parser_source(arguments.read_text(encoding="utf-8")) == []
    assert '"--apply-chat-template"' in arguments.read_text(encoding="utf-8")

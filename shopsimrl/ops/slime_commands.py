"""`shopsimrl slime ...`: the checks and files the slime scripts need, as thin click commands.

`scripts/run_shopsimrl_slime.sh` calls `prepare`; `scripts/convert_hf_to_torch_dist.sh` calls
`check-model` before and `write-manifest` after slime's converter; preflight runs the same
library functions (shopsimrl.ops.launch, shopsimrl.ops.model_files, shopsimrl.ops.chat_template).
`last-hf-save` tells the gate, eval and analyze services which HF copy a round ended with.
`smoke-report` judges a smoke run from slime's job log (the launcher calls it in smoke mode).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group("slime")
def slime() -> None:
    """Checks and files of the slime launch path (used by the scripts; safe to run by hand).

    Example: shopsimrl slime check-model /models/Qwen3.5-4B
    """


def _fail(problems: list[str]) -> None:
    for problem in problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(2)


@slime.command("prepare")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="plugin options YAML whose run_dir may contain {group}")  # fmt: skip
@click.option("--group", required=True, help="run group: names the run dir, checkpoints and W&B group")
@click.option("--base-dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="launch directory; relative paths resolve against it")  # fmt: skip
@click.option("--hf-checkpoint", required=True, help="--hf-checkpoint directory")
@click.option("--ref-load", required=True, help="--ref-load directory (converted checkpoint)")
@click.option("--prompt-data", required=True, help="--prompt-data file")
@click.option("--start-load", default=None,
              help="the previous round's save dir (START_LOAD): the round starts from its final weights")  # fmt: skip
@click.option("--save-dir", default=None, help="this round's --load/--save directory (none for a smoke run)")
@click.option("--megatron-roles", default=None,
              help="PPO with --save-dir: the shipped --megatron-config-path, resolved with the critic's load and save")  # fmt: skip
@click.option("--write", is_flag=True, help="check the inputs and write <run_dir>/shopsim_options.yaml")
@click.argument("model_args", nargs=-1, type=click.UNPROCESSED)
def prepare(config_path, group, base_dir, hf_checkpoint, ref_load, prompt_data, start_load, save_dir, megatron_roles,
            write, model_args) -> None:  # fmt: skip
    """Validate a launch; print the run dir, the options file slime gets and where it starts (one per line).

    With --megatron-roles two more lines: the resolved role file slime gets as --megatron-config-path
    (<run_dir>/megatron_roles.yaml) and where the critic starts.

    Without --write nothing is checked on disk and nothing is written (DRY_RUN). With --write every
    input is checked first (model files, converted checkpoint, prompt data) and all problems are
    listed, exit code 2, before anything is created.

    Example: shopsimrl slime prepare --config configs/shopsim.formal.yaml --group qwen35-4b-round-000 --base-dir . --hf-checkpoint /models/Qwen3.5-4B --ref-load checkpoints/base/Qwen3.5-4B_torch_dist --prompt-data runs/prompts/shopsim_train.jsonl -- --num-layers 32
    """
    from shopsimrl.ops.launch import LaunchError, prepare_launch

    try:
        paths = prepare_launch(config_path=config_path, group=group, base_dir=base_dir.resolve(),
                               hf_checkpoint=hf_checkpoint, ref_load=ref_load, prompt_data=prompt_data,
                               model_args=list(model_args), write=write, start_load=start_load or None,
                               save_dir=save_dir or None, roles_config=megatron_roles or None)  # fmt: skip
    except LaunchError as exc:
        _fail(exc.problems)
    click.echo(str(paths.run_dir))
    click.echo(str(paths.options_file))
    click.echo(paths.start)
    if paths.roles_file is not None:
        click.echo(str(paths.roles_file))
        click.echo(paths.critic)


@slime.command("smoke-report")
@click.option("--slime-log", "log_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the job's output, the launcher's summary line first (<run_dir>/slime_job.log)")  # fmt: skip
@click.option("--out", "out_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="where smoke_report.json goes (the run dir)")  # fmt: skip
@click.option("--algo", type=click.Choice(["grpo", "ppo"]), default="grpo", show_default=True,
              help="ppo adds the PPO criteria and observations")  # fmt: skip
@click.option("--options", "options_path", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="the plugin options slime got: the active chunks of its skillbank are checked after the first batch")  # fmt: skip
def smoke_report(log_path: Path, out_dir: Path, algo: str, options_path: Path | None) -> None:
    """Check a slime smoke run on its job log; write <out>/smoke_report.json; exit 1 if a required check fails.

    Example: shopsimrl slime smoke-report --slime-log runs/qwen35-4b-round-000-smoke/train/slime_job.log --out runs/qwen35-4b-round-000-smoke/train --algo ppo
    """

    from shopsimrl.metrics.smoke import report_lines, write_smoke_report
    from shopsimrl.ops.slime_smoke import evaluate_slime_smoke

    chunks: list[str] = []
    if options_path is not None:
        from shopsimrl.config.options import load_options_file
        from shopsimrl.errors import ConfigError
        from shopsimrl.skills.skillbank import load_skillbank

        try:
            skillbank = load_options_file(options_path).skillbank
            chunks = list(load_skillbank(skillbank).active_ids) if skillbank else []
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    report = evaluate_slime_smoke(log_path, ppo=algo == "ppo", active_chunks=chunks)
    path = write_smoke_report(report, out_dir)
    for line in report_lines(report, path):
        click.echo(line)
    if not report.passed:
        sys.exit(1)


@slime.command("check-model")
@click.argument("model_dir", type=click.Path(path_type=Path))
def check_model(model_dir: Path) -> None:
    """Check a Hugging Face model directory: config, tokenizer and every weight file, by name.

    Example: shopsimrl slime check-model /models/Qwen3.5-4B
    """
    from shopsimrl.ops.model_files import hf_model_problems

    problems = hf_model_problems(model_dir)
    if problems:
        _fail(problems)
    click.echo(f"{model_dir}: config, tokenizer and weights present")


@slime.command("check-converted")
@click.option("--hf-checkpoint", required=True, help="the Hugging Face model directory it was converted from")
@click.option("--ref-load", required=True, help="the converted torch_dist directory")
@click.argument("model_args", nargs=-1, type=click.UNPROCESSED)
def check_converted(hf_checkpoint: str, ref_load: str, model_args: tuple[str, ...]) -> None:
    """Check that a converted checkpoint is complete and was made from this HF config and these flags.

    Example: shopsimrl slime check-converted --hf-checkpoint /models/Qwen3.5-4B --ref-load checkpoints/base/Qwen3.5-4B_torch_dist -- --num-layers 32
    """
    from shopsimrl.ops.model_files import converted_checkpoint_problems

    problems = converted_checkpoint_problems(ref_load, hf_checkpoint, model_args)
    if problems:
        _fail(problems)
    click.echo(f"{ref_load}: converted from {hf_checkpoint} with these model arguments")


@slime.command("write-manifest")
@click.option("--hf-checkpoint", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="the converted checkpoint directory")  # fmt: skip
@click.option("--slime-commit", default="unknown", show_default=True)
@click.argument("model_args", nargs=-1, type=click.UNPROCESSED)
def write_manifest(hf_checkpoint: Path, out_dir: Path, slime_commit: str, model_args: tuple[str, ...]) -> None:
    """Record which HF config and model arguments a converted checkpoint was made from.

    Example: shopsimrl slime write-manifest --hf-checkpoint /models/Qwen3.5-4B --out checkpoints/base/Qwen3.5-4B_torch_dist -- --num-layers 32
    """
    from shopsimrl.ops.model_files import MANIFEST_NAME, conversion_manifest
    from shopsimrl.storage import atomic_write_json

    atomic_write_json(out_dir / MANIFEST_NAME, conversion_manifest(hf_checkpoint, model_args, slime_commit))
    click.echo(f"wrote {out_dir / MANIFEST_NAME}")


@slime.command("check-chat-template")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["xml", "json"]), default="xml", show_default=True,
              help="our tool-call format (shopsim.tool_call_format)")  # fmt: skip
def check_chat_template(model_dir: Path, fmt: str) -> None:
    """Compare the rollout's token ids with the checkpoint's own chat template, turn by turn.

    Renders a first turn (system + tools + user) and a continuation after a tool response both
    ways and exits 1 at the first differing token.

    Example: shopsimrl slime check-chat-template /models/Qwen3.5-4B
    """
    from transformers import AutoTokenizer

    from shopsimrl.ops.chat_template import compare_with_template

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    mismatches = compare_with_template(tokenizer, fmt)
    if mismatches:
        for mismatch in mismatches:
            click.echo(f"mismatch: {mismatch}", err=True)
        sys.exit(1)
    click.echo(f"{model_dir}: the rollout ({fmt}) equals the checkpoint's chat template on every turn")


@slime.command("last-hf-save")
@click.argument("save_dir", type=click.Path(path_type=Path))
def last_hf_save_command(save_dir: Path) -> None:
    """Print a slime save dir's highest-numbered hf/rollout-<n> directory (the round's final policy).

    Exit code 2, naming the directory, when it holds no HF save (slime writes them with --save-hf).

    Example: shopsimrl slime last-hf-save checkpoints/qwen35-4b-round-000
    """
    from shopsimrl.models.slime_saves import SlimeSaveError, last_hf_save

    try:
        path = last_hf_save(save_dir)
    except SlimeSaveError as exc:
        _fail([str(exc)])
    click.echo(str(path))
